"""A step's confirmation always ends, whatever its readings do: on Docker a reading is admin API calls and probes
that take seconds, and one that runs past the expectation's bound (or never returns) must still decide it, not
leave the runner waiting for a decision nobody will make (CI once waited 900 s on a partition of a host node)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import networkx as nx
import pytest
import trio
import trio.testing

from orchestrator.chaos.checker import NodeState
from orchestrator.chaos.confirm import PEER_DEADLINE_S, READ_GRACE_S, Confirmer

A, B = b"a" * 32, b"b" * 32


class _TimedObservation:
    """The part of a Docker-like backend the confirmer reads: trio's clock, readings that take ``read_s`` each,
    the cut link still peered until ``dropped_at`` (None: never), polls run as tasks in a nursery."""

    name = "timed"
    measures_faults = True

    def __init__(self, nursery: trio.Nursery, read_s: float, dropped_at: float | None) -> None:
        self.nursery, self.read_s, self.dropped_at = nursery, read_s, dropped_at

    def now(self) -> float:
        return trio.current_time()

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(max(0.0, seconds))

    def live_graph(self) -> nx.Graph:
        return nx.Graph([("a", "b")])

    def beside(self, poll: Callable[[], Awaitable[bool]], every_s: float, until: float) -> None:
        async def loop() -> None:
            while not await poll() and trio.current_time() < until:
                await trio.sleep(every_s)

        self.nursery.start_soon(loop)

    async def peer_keys(self, names: Iterable[str]) -> dict[str, frozenset[bytes] | None]:
        await trio.sleep(self.read_s)
        up = self.dropped_at is None or trio.current_time() < self.dropped_at
        return {n: frozenset({B if n == "a" else A}) if up else frozenset() for n in names}

    async def probe(self, pairs: list[tuple[str, str]], timeout_s: float) -> list[bool]:
        await trio.sleep(self.read_s)
        return [False for _ in pairs]


def _cut(read_s: float, dropped_at: float | None) -> tuple[float, dict[str, object]]:
    async def main() -> tuple[float, dict[str, object]]:
        with trio.fail_after(600):  # virtual seconds: a confirmer that never decides fails here, not hangs
            return await decide()

    async def decide() -> tuple[float, dict[str, object]]:
        async with trio.open_nursery() as nursery:
            obs = _TimedObservation(nursery, read_s, dropped_at)
            before = {n: NodeState(key=k, root=A, descending=None, peers=frozenset({B if n == "a" else A}))
                      for n, k in (("a", A), ("b", B))}  # fmt: skip
            confirm = Confirmer(obs, before)  # type: ignore[arg-type]
            await confirm.cut([("a", "b")], "link_down")
            got = await confirm.settled()
            assert got is not None
            took = trio.current_time()
            nursery.cancel_scope.cancel()
        return took, got.to_dict()

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_reading_that_outlasts_the_bound_still_decides_the_step() -> None:
    """Each reading takes longer than a poll and ends past the bound: the step is decided not confirmed at the
    first reading that ends after the bound, with what the last reading saw."""
    bound = PEER_DEADLINE_S + 2 * 0.5 + 4.0
    took, got = _cut(read_s=3.7, dropped_at=None)
    assert got["ok"] is False and "still peered" in str(got["how"]), got
    assert bound <= took <= bound + 2 * 3.7 + 0.5, (took, got)


def test_a_reading_that_never_returns_is_decided_after_the_grace() -> None:
    took, got = _cut(read_s=10_000.0, dropped_at=None)
    assert got["ok"] is False and "did not return" in str(got["how"]), got
    assert took == pytest.approx(PEER_DEADLINE_S + 2 * 0.5 + 4.0 + READ_GRACE_S, abs=0.6)


def test_slow_readings_still_confirm_a_cut_that_happened() -> None:
    took, got = _cut(read_s=2.2, dropped_at=6.0)
    assert got["ok"] is True and got["latency_s"] is not None and got["latency_s"] >= 6.0 - 2.2, got
