"""What a fault's confirmation measures in process (orchestrator.chaos.confirm), on InprocNetwork's public methods.

Everything here reads the network and sends nothing into it: a virtual-clock run gives the same history with or
without the confirmations. A link's shape is measured on a twin of its shaper (``InprocNetwork.twin_shaper``: made
by the same factory as the link's own, on an RNG of its own), so the link's own RNG and queue are left alone.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

from contract.frames import FRAME_TYPE_NAMES, FRAME_TYPE_NUMBERS
from contract.links import LinkShape
from node.core.recorder import DROPPED, RECEIVED
from node.flight import read_out

from orchestrator.backends.inproc import InprocNetwork, SimNode
from orchestrator.tools.links_check import PING_FRAME_BYTES, asked_for, judge_loss, judge_rate, judge_rtt

__all__ = ["adversary_counts", "at_once", "beside", "frames_sent", "kind_slots", "measure_link", "peer_keys",
           "probe"]

T = TypeVar("T")

RTT_SAMPLES = 400  # frames each way, 1 s apart (no queue): the median RTT is judged
LOSS_SAMPLES = 4000  # frames each way for the loss (±0.3 percentage point at 2 %, against the check's ±1)
RATE_FRAMES = 200  # 1500-byte frames offered at twice the asked rate: the link's server stays busy, and the
#: slope of their arrivals gives the rate (jitter and retransmissions only ever delay a frame: the least slope)
_LATE_S = 0.19  # a frame this much later than the fastest was lost and sent again (the links' retransmit mode, RTO 0.2 s)


def at_once(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never waits (the in-process observations) to its end, now."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("an in-process observation waited on something")


def beside(net: InprocNetwork, poll: Callable[[], Awaitable[bool]], every_s: float, until: float) -> None:
    """``poll()`` now and every ``every_s`` on the event heap until it returns True or ``until`` passes."""

    def tick(now: float) -> None:
        if at_once(poll()) or now >= until:  # type: ignore[arg-type]
            return
        net.call_at(now + every_s, tick)

    tick(net.now)


def peer_keys(net: InprocNetwork, names: Iterable[str]) -> dict[str, frozenset[bytes] | None]:
    return {n: net.peer_keys(n) if net.answers(n) else None for n in names}


def frames_sent(net: InprocNetwork, names: Iterable[str]) -> dict[str, int | None]:
    return {n: net.nodes[n].frames_out if n in net.nodes else None for n in names}


def probe(net: InprocNetwork, pairs: Iterable[tuple[str, str]]) -> list[bool]:
    return [net.carries(a, b) for a, b in pairs]


def kind_slots(kinds: Iterable[str]) -> list[int]:
    """The counter slots (contract.frames) of frame kinds as an adversary names them (``all``: every type)."""
    kinds = set(kinds)
    if "all" in kinds:
        return list(range(len(FRAME_TYPE_NAMES) + 1))
    return [FRAME_TYPE_NAMES.index(k) for k in sorted(kinds) if k in FRAME_TYPE_NAMES]


def adversary_counts(net: InprocNetwork, names: Iterable[str], kinds: Iterable[str], peer: str | None,
                     since: float | None) -> dict[str, tuple[int, int] | str]:  # fmt: skip
    """``(received, dropped)`` frames of ``kinds`` for each node (orchestrator.chaos.backend.Observation): from
    every peer so far (``frames_in`` and the router's ``frame_dropped`` counters, by type), or from ``peer`` since
    ``since`` (the node's flight recorder, on its ports to ``peer``)."""
    kinds = tuple(kinds)
    out: dict[str, tuple[int, int] | str] = {}
    for n in names:
        node = net.nodes.get(n)
        if node is None:
            out[n] = f"{n} is not in the network"
        elif peer is None:
            slots = kind_slots(kinds)
            types = None if "all" in kinds else {FRAME_TYPE_NUMBERS[s] for s in slots}
            dropped = sum(v for k, v in node.router.counters.items()
                          if k[0] == "frame_dropped" and k[-1] == "adversary" and (types is None or k[1] in types))
            out[n] = (sum(node.frames_in[s] for s in slots), dropped)  # fmt: skip
        else:
            out[n] = _from_peer(net, node, peer, kinds, since if since is not None else -math.inf)
    return out


def _from_peer(net: InprocNetwork, node: SimNode, peer: str, kinds: tuple[str, ...],
               since: float) -> tuple[int, int] | str:  # fmt: skip
    """The frames of ``kinds`` ``node`` received on its ports to ``peer`` since ``since``, and those its adversary
    dropped, from its flight recorder (read as a dump reads it: nothing is added, nothing the window keeps is
    taken)."""
    if node.recorder is None:
        return f"frames from {peer} are not told apart from other peers': {node.name}'s flight recorder is off"
    ports = {e.port for e in net.ends_between(node.name, peer)}
    now = net.now
    mine = [e for e in node.recorder.entries(now) if e[0] >= since and e[2] in ports
            and (e[1] == RECEIVED or (e[1] == DROPPED and e[4] == "adversary"))]  # fmt: skip
    wanted = None if "all" in kinds else set(kinds)
    rx = dropped = 0
    for line, _ in read_out(mine, now, node.key, node.name):
        if wanted is None or line["frame_type"] in wanted:
            if line["kind"] == "received":
                rx += 1
            else:
                dropped += 1
    return rx, dropped


def _direction(net: InprocNetwork, a: str, b: str, seed: int, rate_mbit: float | None) -> dict[str, Any] | None:
    """One direction measured on twins of its shaper: single frames 1 s apart (delays, losses), then, when a rate
    is asked, frames offered at twice that rate."""
    ends = net.ends_between(a, b)
    if not ends:
        return None
    end = ends[0]
    rng = random.Random(f"measure-{seed}-{a}-{b}")
    t0 = net.now
    twin = net.twin_shaper(end, random.Random(rng.getrandbits(64)))
    delays: list[float | None] = []
    for i in range(LOSS_SAMPLES):
        at = twin(t0 + i, PING_FRAME_BYTES)
        delays.append(None if at is None else at - (t0 + i))
    fastest = min((d for d in delays if d is not None), default=0.0)
    kept = [d for d in delays if d is not None and d < fastest + _LATE_S]
    rate = None
    if rate_mbit:
        burst = net.twin_shaper(end, random.Random(rng.getrandbits(64)))
        pace = 1500 * 8 / (2 * rate_mbit * 1e6)
        got = [x for x in (burst(t0 + i * pace, 1500) for i in range(RATE_FRAMES)) if x is not None]
        half = len(got) // 2
        slope = min(((y - got[0]) / i for i, y in enumerate(got) if i >= max(1, half)), default=None)
        rate = 1500 * 8 / slope / 1e6 if slope else None
    return {"delays": kept[:RTT_SAMPLES], "loss_pct": 100.0 * (len(delays) - len(kept)) / len(delays),
            "rate_mbit": rate}


def measure_link(net: InprocNetwork, a: str, b: str, shape: LinkShape, seed: int) -> dict[str, Any]:
    """The link ``a``--``b`` measured against ``shape`` (a shape with no delay: the network's default link delay,
    which is what such a link gets in process), judged with the links check's tolerances."""
    ab, ba = _direction(net, a, b, seed, shape.rate_mbit), _direction(net, b, a, seed, shape.rate_mbit)
    if ab is None or ba is None:
        return {"pass": None, "checks": {}, "how": f"the link {a}--{b} is down: nothing to measure"}
    if shape == LinkShape():
        shape = LinkShape(delay_ms=net.link_delay_s * 1000)
    asked = asked_for(shape, "userspace")
    n = min(len(ab["delays"]), len(ba["delays"]))
    rtt_ms = statistics.median(1000 * (x + y) for x, y in zip(ab["delays"][:n], ba["delays"][:n])) if n else float("nan")
    checks = {"rtt": judge_rtt(float(asked["rtt_ms"] or 0.0), rtt_ms),
              "loss": judge_loss(shape.loss_pct, {f"{a}->{b}": ab["loss_pct"], f"{b}->{a}": ba["loss_pct"]})}
    if shape.rate_mbit is not None:
        got = {f"{x}->{y}": d["rate_mbit"] or float("nan") for x, y, d in ((a, b, ab), (b, a, ba))}
        checks["rate"] = judge_rate(shape.rate_mbit, got)
    ok = all(c["pass"] for c in checks.values())
    how = ", ".join(_said(k, c) for k, c in checks.items())
    return {"pass": ok, "checks": checks, "how": f"measured on the in-memory link: {how}"}


def _said(metric: str, c: dict[str, Any]) -> str:
    mark = "" if c["pass"] else " FAILED"
    if metric == "rtt":
        return f"rtt {c['got_ms']} ms (asked {c['asked_ms']} ms {c['tolerance']}){mark}"
    if metric == "loss":
        got = "/".join(f"{v:g}" for v in c["got_pct"].values())
        return f"loss {got} % (asked {c['asked_pct']:g} % {c['tolerance']}){mark}"
    got = "/".join(f"{v:g}" for v in c["got_mbit"].values() if v is not None)
    return f"rate {got} Mbit/s (asked {c['asked_mbit']:g} Mbit/s {c['tolerance']}){mark}"
