"""What the chaos runner drives, as six small protocols every backend (in process, Docker, swarm) implements:
:class:`Lifecycle` (the run's life and clock), :class:`Observation` (live graph, state, pings, convergence),
:class:`BackgroundTraffic` (the background pings), :class:`NodeFaults`, :class:`LinkFaults` and :class:`Movement`
(nodes that move: its defaults are those of a backend whose nodes stand still); :class:`ChaosBackend` is all six.
A step handler (orchestrator.chaos.apply) asks only for what it uses.

Every duration is in the backend's own seconds: protocol
time for the in-process backend (virtual or real clock), wall time for Docker.
A fault means the same thing on every backend; where it cannot, the backend's
docstring says how it differs (docs/chaos.md has the table).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import networkx as nx
import trio

from node.core.variants import VariantSpec

from orchestrator.chaos.checker import NodeState, PingOutcome

__all__ = ["BackgroundTraffic", "ChaosBackend", "Converged", "DeferredRemoval", "FlightDump", "Lifecycle", "LinkFaults",
           "Movement", "NodeFaults", "Observation", "PLANTS", "PLANT_ENV", "TrafficSample", "planted_defect"]

#: TEST ONLY: the environment variable that plants a defect in a backend (never set by default; tests set it to
#: show that a fault that did not happen comes out ``invalid`` and a stall ``stuck``)
PLANT_ENV = "SNEKBED_CHAOS_PLANT"
#: the defects a backend can be planted with: "restart_keeps_state" (in process), "ignore_partition",
#: "pause_noop", "link_change_noop" (the fault is reported done and not done), "stall[=NODE]" (in process: NODE,
#: by default the highest key, never accepts a bootstrap)
PLANTS = ("restart_keeps_state", "ignore_partition", "pause_noop", "link_change_noop", "stall")


def planted_defect(given: str | None) -> tuple[str | None, str | None]:
    """TEST ONLY: the defect planted in a backend, ``given`` (a constructor's argument) or else $SNEKBED_CHAOS_PLANT:
    ``(name, node)`` (node for ``stall=NODE``), ``(None, None)`` when none. Raises ValueError for an unknown one."""
    text = given if given is not None else os.environ.get(PLANT_ENV) or None
    if text is None:
        return None, None
    name, _, node = text.partition("=")
    if name not in PLANTS:
        raise ValueError(f"unknown planted defect {text!r} (known: {', '.join(PLANTS)})")
    return name, node or None


@dataclass(frozen=True, slots=True)
class Converged:
    """A wait for convergence: seconds from ``since`` to the last tree / snake change, None when not converged."""

    tree_s: float | None
    snake_s: float | None
    waited_s: float

    @property
    def converged(self) -> bool:
        return self.snake_s is not None


@dataclass(frozen=True, slots=True)
class TrafficSample:
    """One background ping: sent at ``t`` (backend seconds), answered or not."""

    t: float
    a: str
    b: str
    mode: str
    delivered: bool
    rtt_s: float | None = None


@dataclass(frozen=True, slots=True)
class FlightDump:
    """One node's flight recorder read out (node.flight): its JSON lines (contract.recorder) and its pcapng."""

    jsonl: bytes
    pcapng: bytes


class DeferredRemoval:
    """A run's teardown, finished in a thread of its own while the caller goes on (Docker: removing containers and
    networks takes seconds of the engine's time once the nodes have stopped). ``wait`` joins it and re-raises
    what it raised. The thread is not a daemon: the process does not exit before the removal has ended."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._started = 0.0
        #: seconds the removal took (None until it has ended)
        self.took_s: float | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, remove: Callable[[], None]) -> None:
        if self._thread is not None:
            raise RuntimeError("this removal has already been started")

        def run() -> None:
            try:
                remove()
            except BaseException as exc:  # handed to wait(), which re-raises it in the caller's thread
                self._error = exc
            finally:
                self.took_s = time.monotonic() - self._started

        self._started = time.monotonic()
        self._thread = threading.Thread(target=run, name="snekbed-removal")
        self._thread.start()

    def wait(self) -> float:
        """Block until the removal has ended (at once when it never started); seconds waited here."""
        t = time.monotonic()
        if self._thread is not None:
            self._thread.join()
            if self._error is not None:
                raise self._error
        return time.monotonic() - t


class Lifecycle(Protocol):
    """The run's life and clock: bring the network up, let time pass, take it down, and note each fault."""

    name: str

    def now(self) -> float: ...

    async def start(self, nursery: trio.Nursery | None = None) -> None:
        """Bring the network up; background work (traffic) may run in ``nursery``."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    async def stop(self) -> None:
        """The run ended as planned: finish the record, tear down what the backend started."""
        ...

    async def abort(self, exc: BaseException) -> None:
        """The run failed or was interrupted: record why, tear down. Never raises over ``exc``."""
        ...

    def record_action(self, action: str, target: str | None, detail: dict | None, at: float) -> None:
        """Append one line to the run's actions.jsonl (when the run is recorded)."""
        ...


class Observation(Protocol):
    """What the checker and the target roles read: the live graph, the nodes' state, pings, convergence."""

    #: nodes that run the Go reference (a real-time backend's mixed topology; none in process): the checker allows
    #: their lost pings longer to come back (runner.REFERENCE_COORDS_S)
    reference_nodes: frozenset[str] = frozenset()

    def live_graph(self) -> nx.Graph:
        """Nodes that are alive and not paused, and the links between them that are up."""
        ...

    def known_nodes(self) -> list[str]:
        """Every node the run has ever had (alive or not)."""
        ...

    async def states(self) -> dict[str, NodeState]:
        """The state of every live node that answers."""
        ...

    async def parents(self) -> dict[str, str | None]:
        """Each live node's parent, by name (None for a root)."""
        ...

    async def wait_converged(self, since: float, within_s: float,
                             give_up: Callable[[], bool] | None = None) -> Converged:  # fmt: skip
        """Wait until the live graph has converged, at most ``within_s`` after ``since``, or until ``give_up()``
        (asked at each look) is true."""
        ...

    def reconvergence_bound_s(self, margin_s: float) -> float: ...

    async def ping(self, pairs: list[tuple[str, str]], modes: tuple[str, ...], timeout_s: float) -> list[PingOutcome]:
        """Ping every pair in every mode, concurrently; wait for each answer or its timeout."""
        ...

    # What a fault's confirmation reads (orchestrator.chaos.confirm): measured on the nodes and the links,
    # whatever the backend believes it did. In process none of these waits on anything (``beside`` runs them on
    # the event heap); on Docker they ask the nodes' admin APIs.

    async def peer_keys(self, names: Iterable[str]) -> dict[str, frozenset[bytes] | None]:
        """Control plane: the keys each node's router lists as up peers; None for a node that does not answer
        (dead, frozen), asked whether or not the backend thinks it is live."""
        ...

    async def frames_sent(self, names: Iterable[str]) -> dict[str, int | None]:
        """Data plane: frames each node has written onto its links so far; None where that is not counted."""
        ...

    async def probe(self, pairs: list[tuple[str, str]], timeout_s: float) -> list[bool]:
        """Data plane, link by link: whether a frame ``a`` writes onto its link to ``b`` arrives now, for each pair
        (in process on the in-memory link, without sending one; on Docker a datagram from ``a``'s container to
        ``b``'s address on their link, answered by ``b``'s kernel, so the nodes see nothing)."""
        ...

    async def measure_link(self, a: str, b: str, link_class: str | None,
                           shaping: Mapping[str, float] | None) -> dict[str, Any]:  # fmt: skip
        """The link ``a``--``b`` measured against what a link change asked (``link_class``, None for the link's
        class as it is, with ``shaping``'s fields over its shape), with the links check's tolerances
        (orchestrator.tools.links_check): ``{"pass": bool | None, "checks": {...}, "how": str}``; ``pass`` None when
        it cannot be measured here (says why)."""
        ...

    async def adversary_counts(self, names: Iterable[str], kinds: Iterable[str], peer: str | None = None,
                               since: float | None = None) -> dict[str, tuple[int, int] | str]:  # fmt: skip
        """``(received, dropped)`` for each node: the frames of ``kinds`` (frame type names, contract.frames;
        ``all``: every type) it received from its peers and those its adversary dropped. With ``peer`` None, so far
        (its counters); with a ``peer``, those from that peer alone since the backend time ``since`` (its flight
        recorder: the frames it received and dropped on its ports to ``peer``). Why not, where they are not
        counted."""
        ...

    def beside(self, poll: Callable[[], Awaitable[bool]], every_s: float, until: float) -> None:
        """Call ``poll()`` now and every ``every_s`` of backend time after, until it returns True or the backend's
        clock passes ``until``, beside the run and without disturbing it (in process: passive calls on the event
        heap, each run to its end at once; on Docker: a task in the run's nursery)."""
        ...

    async def flight_records(self, names: Iterable[str]) -> dict[str, FlightDump | str]:
        """Each node's flight recorder as it is now (the last seconds of frames and routing events it saw), or why
        there is none (the recorder is off; the node runs another implementation; it did not answer). In process
        the rings are read directly, without disturbing the run; on Docker through each node's admin API. A
        backend that cannot read them says so for every node (this default)."""
        return {name: f"not available: the {type(self).__name__} backend reads no flight recorder" for name in names}


class BackgroundTraffic(Protocol):
    """The background ping mesh that keeps flowing through the faults."""

    def traffic(self, enabled: bool, rate_per_s: float, pairs: list[tuple[str, str]], modes: tuple[str, ...],
                timeout_s: float) -> None:  # fmt: skip
        """Start, change or stop (``enabled`` False) the background pings over ``pairs``, modes taking turns."""
        ...

    def traffic_samples(self) -> list[TrafficSample]:
        """Every background ping sent so far, answered or not."""
        ...


class NodeFaults(Protocol):
    """Faults of one node. A fault of a node in a state where it means nothing (kill a dead node, resume a
    running one) is a no-op, as in the reference simulator."""

    async def kill(self, name: str) -> None: ...

    async def restart(self, name: str) -> None:
        """Kill if alive, then start again with the same key and peers."""
        ...

    async def pause(self, name: str) -> None: ...

    async def resume(self, name: str) -> None: ...

    async def remove_node(self, name: str) -> bool:
        """The node leaves for good; False when it was not there (a no-op, as in the reference)."""
        ...

    async def add_node(self, name: str, peers: tuple[str, ...], link_class: str, adversary: bool,
                       variant: VariantSpec | None = None) -> None:  # fmt: skip
        """``name`` joins, linked to ``peers``, running ``variant`` (default: the run's)."""
        ...

    async def adversary(self, name: str, drop: dict[str, float], peer: str | None) -> None:
        """``name`` drops received frames by kind (percentages), from every peer or from ``peer``."""
        ...


class LinkFaults(Protocol):
    """Faults of links: one link, or every link between groups of nodes."""

    async def link_down(self, a: str, b: str) -> bool:
        """False when there was no such link (a no-op)."""
        ...

    async def link_up(self, a: str, b: str, link_class: str | None = None) -> bool:
        """Bring the link back, or make it (of ``link_class``) when the run never had it; False when it cannot."""
        ...

    async def link_change(self, a: str, b: str, link_class: str | None, shaping: dict[str, float] | None) -> None: ...

    async def partition(self, groups: list[set[str]]) -> list[tuple[str, str]]:
        """Cut every link between groups; returns the links cut."""
        ...

    async def heal(self) -> list[tuple[str, str]]:
        """Restore every link a partition cut; returns them."""
        ...


class Movement(Protocol):
    """Nodes that move (a topology with radios, docs/mobility.md): the ``mobility`` step, and what the checker needs
    to judge a graph that changes as they move. The defaults are a backend's whose nodes stand still."""

    #: whether the run's nodes move (its topology has radios)
    moves: bool = False

    async def mobility(self, step: Any) -> str | None:
        """Apply a ``mobility`` step (orchestrator.chaos.steps.Mobility); the detail for its record, None when the
        run's nodes do not move."""
        return None

    def moved_since(self, since: float) -> set[str]:
        """The live nodes whose component of the live graph gained or lost a link because nodes moved after
        backend time ``since`` (not because of a fault): the ones the checker cannot expect to have re-converged."""
        return set()


class Attacks(Protocol):
    """Adversary strategies other than drop (node.core.attacks; docs/attacks.md) and ground keys for joins.
    A backend without them says so (NotImplementedError, which the step reports)."""

    async def attack(self, name: str, strategy: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """``name`` runs ``strategy`` with ``params`` (a ``victim`` as a key in hex); ``none``: honest again. Returns
        the description of the strategy it replaced (what it did: ``swallowed``, ``made``), None when none."""
        raise NotImplementedError(f"the {getattr(self, 'name', '?')} backend has no adversary strategies but drop")

    async def node_keys(self, names: Iterable[str] | None = None) -> dict[str, bytes]:
        """The public key of each node of ``names`` (None: every node the run has made)."""
        raise NotImplementedError(f"the {getattr(self, 'name', '?')} backend does not list its nodes' keys")

    async def use_key(self, name: str, seed: bytes) -> None:
        """``name``, when it next joins, runs with the key of this ed25519 seed (a ground key)."""
        raise NotImplementedError(f"the {getattr(self, 'name', '?')} backend cannot give a joining node a ground key")


class ChaosBackend(Lifecycle, Observation, BackgroundTraffic, NodeFaults, LinkFaults, Movement, Attacks, Protocol):
    """Everything the chaos runner drives: each backend (in process, Docker, swarm) implements all seven.
    ``measures_faults``: it implements the confirmations' observation methods (a backend that does not gets every
    fault recorded as not measured, ``ok`` None, never as confirmed)."""

    measures_faults: bool = False
