"""Confirmed faults: every fault a step asks for is measured taking effect, on the nodes and on the links.

A step's handler (orchestrator.chaos.apply) tells the step's :class:`Confirmer` what it just did, at the moment it
took effect: :meth:`Confirmer.silenced` (kill, remove_node, pause, a churned node leaving), :meth:`~Confirmer.back`
(restart, resume, a node joining, a churned node coming back), :meth:`~Confirmer.cut` (partition, link_down, a
flap's first down), :meth:`~Confirmer.restored` (heal, link_up, a link joining, a flap's last up),
:meth:`~Confirmer.shaped` (link_change) and :meth:`~Confirmer.dropping` (adversary): one expectation class per kind
of fault. Each expectation reads the backend's Observation (``peer_keys``: the control plane; ``frames_sent`` and
``probe``: the data plane; ``measure_link``; ``adversary_counts``) beside the run (``beside``: in process passive calls on
the event heap, which change nothing in the run; on Docker a task asking the nodes' admin APIs) until it holds or
its bound passes. The runner waits for the last of them (:meth:`Confirmer.settled`) and records the step's
``confirmed``: ``{ok, latency_s, how}``. A fault not confirmed within its bound makes the step ``invalid``: the run
proves nothing about a fault that did not happen. docs/chaos.md, "Confirmed faults", says what each one measures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.chaos.backend import ChaosBackend
from orchestrator.chaos.checker import NodeState

__all__ = ["BACK_S", "Confirmation", "Confirmer", "Expectation", "PEER_DEADLINE_S", "READ_GRACE_S", "SHAPE_S",
           "SILENCE_S"]

#: PROTOCOL.md §3.5: a peer silent this long is dropped (the keepalive deadline)
PEER_DEADLINE_S = 5.0
#: a node found silent must have sent nothing for at least this long (one SNEK maintenance tick)
SILENCE_S = 1.0
#: how long a node that came back, or a link restored, may take to be peered and carry frames again (a dialer's
#: backoff on Docker; at once in process)
BACK_S = 30.0
#: how long a link change may take to be measured in its new shape (the links check takes seconds on Docker)
SHAPE_S = 60.0
#: how long an adversary's drop counters may take to move: three bootstrap intervals and a maintenance tick
DROP_S = 3 * 6.0 + 1.0
_SAMPLE = 8  # links or pairs each expectation looks at, at most
_PROBE_TIMEOUT_S = 1.5
#: how long past its bound an expectation's last reading may still be running (admin API calls, probes, a links
#: check); an expectation undecided by then is decided not confirmed (its reading did not return), so a step's
#: confirmation always ends
READ_GRACE_S = 20.0


@dataclass(frozen=True, slots=True)
class Confirmation:
    """Whether a step's faults were measured taking effect: ``ok`` None when they could not be measured here (the
    reason is in ``how``), ``latency_s`` from the fault to the measurement that confirmed it (the slowest part)."""

    ok: bool | None
    latency_s: float | None
    how: str

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "latency_s": self.latency_s, "how": self.how}

    @classmethod
    def combine(cls, parts: Sequence[Confirmation]) -> Confirmation:
        oks = [p.ok for p in parts]
        ok = False if False in oks else True if True in oks else None
        lat = [p.latency_s for p in parts if p.latency_s is not None]
        shown = [p for p in parts if p.ok is False] or list(parts)
        how = "; ".join(p.how for p in shown[:4]) + (f" (+{len(shown) - 4} more)" if len(shown) > 4 else "")
        return cls(ok, round(max(lat), 2) if lat and ok is not False else None, how)


@dataclass
class _Expect:
    """One fault's expectation: ``read`` returns how it was confirmed, or None (``last`` says why not yet)."""

    what: str
    t0: float
    within_s: float
    done: Confirmation | None = field(default=None, init=False)
    last: str = field(default="nothing read yet", init=False)

    async def poll(self, obs: ChaosBackend) -> bool:
        if self.done is not None:
            return True
        now = obs.now()
        try:
            how = await self.read(obs, now)
        except Exception as exc:  # an admin API that did not answer is a reading that did not confirm
            how, self.last = None, f"could not read: {exc}"
        if self.done is not None:  # read decided it cannot be measured here
            return True
        if how is not None:
            self.done = Confirmation(True, round(self.latency(now), 2), f"{self.what}: {how}")
        elif obs.now() >= self.t0 + self.within_s:  # after the reading: a slow one may have run past the bound
            self.done = Confirmation(False, None, f"{self.what}: not confirmed within {self.within_s:g} s: {self.last}")
        return self.done is not None

    def latency(self, now: float) -> float:
        return now - self.t0

    async def read(self, obs: ChaosBackend, now: float) -> str | None:
        raise NotImplementedError


#: one fault's expectation, as :meth:`Confirmer.silenced` hands it back for :meth:`Confirmer.decided`
Expectation = _Expect


def _has(keys: Mapping[str, frozenset[bytes] | None], a: str, key: bytes | None) -> bool:
    """Whether ``a`` answers and lists ``key`` as an up peer."""
    got = keys.get(a)
    return got is not None and key is not None and key in got


@dataclass
class _Silenced(_Expect):
    """A killed, removed or paused node: every former peer drops the peering within the keepalive deadline, and
    the node answers nothing and sends nothing (in process its router writes no frame; on Docker a probe from a
    former peer goes unanswered). A pause shorter than the deadline is judged on the node's silence alone."""

    node: str = ""
    key: bytes | None = None
    peers: tuple[str, ...] = ()
    sent0: int | None = None
    peers_too: bool = True
    dropped_at: float | None = None

    def latency(self, now: float) -> float:
        return (self.dropped_at if self.dropped_at is not None else now) - self.t0

    async def read(self, obs: ChaosBackend, now: float) -> str | None:
        keys = await obs.peer_keys([self.node, *self.peers])
        if keys.get(self.node) is not None:
            self.last = f"{self.node} still answers (its router lists {len(keys[self.node] or ())} peer(s))"
            return None
        still = [p for p in self.peers if _has(keys, p, self.key)] if self.peers_too else []
        if still:
            self.last = f"{len(still)} former peer(s) still list it: {', '.join(still[:_SAMPLE])}"
            return None
        if self.dropped_at is None:
            self.dropped_at = now
        sent = (await obs.frames_sent([self.node])).get(self.node)
        if sent is not None and self.sent0 is not None:
            if sent != self.sent0:
                self.last = f"{self.node} wrote {sent - self.sent0} frame(s) since"
                return None
            if now - self.t0 < SILENCE_S:
                self.last = f"{self.node} silent for {now - self.t0:.2f} s only"
                return None
            data = f"it wrote no frame in {now - self.t0:.1f} s"
        else:
            live = [p for p in self.peers if keys.get(p) is not None][:1]
            if live and any(p.delivered for p in await obs.ping([(live[0], self.node)], ("snek",), _PROBE_TIMEOUT_S)):
                self.last = f"a ping from {live[0]} reached {self.node}"
                return None
            data = f"a ping from {live[0]} went unanswered" if live else "no former peer left to ping from"
        ctrl = f"{len(self.peers)} former peer(s) dropped the peering" if self.peers_too else "peers not asked"
        return f"{ctrl}, {self.node} answers nothing, {data}"


@dataclass
class _Back(_Expect):
    """A node that came back (restart, resume, join): it answers, it and a neighbour list each other as peers,
    and a probe from that neighbour reaches it."""

    node: str = ""
    neighbours: tuple[str, ...] = ()
    keys: Mapping[str, bytes] = field(default_factory=dict)

    async def read(self, obs: ChaosBackend, now: float) -> str | None:
        got = await obs.peer_keys([self.node, *self.neighbours])
        mine = got.get(self.node)
        if mine is None:
            self.last = f"{self.node} does not answer"
            return None
        if not self.neighbours:
            return f"{self.node} answers (no live neighbour to peer with)"
        both = [n for n in self.neighbours if self.keys.get(n) in mine and _has(got, n, self.keys.get(self.node))]
        if not both:
            self.last = f"{self.node} and none of its {len(self.neighbours)} live neighbour(s) list each other"
            return None
        if not all(await obs.probe([(both[0], self.node)], _PROBE_TIMEOUT_S)):
            self.last = f"a probe from {both[0]} did not reach {self.node}"
            return None
        return f"{self.node} answers, peered with {len(both)} neighbour(s), a probe from {both[0]} reached it"


@dataclass
class _Cut(_Expect):
    """Links cut (partition, link_down): both ends drop the peering, a probe across the cut is not delivered, and
    links inside each side still carry frames (peered at both ends, a probe over them delivered)."""

    links: tuple[tuple[str, str], ...] = ()
    inside: tuple[tuple[str, str], ...] = ()
    keys: Mapping[str, bytes] = field(default_factory=dict)
    total: int = 0
    #: the links were down for less than the keepalive deadline (a flap): the peers cannot be expected to notice,
    #: only the data plane is judged, and a reading that ends after the window says nothing
    short: bool = False

    async def read(self, obs: ChaosBackend, now: float) -> str | None:
        how = await self._read(obs)
        if self.short and obs.now() > self.t0 + self.within_s:
            self.done = Confirmation(None, None, f"{self.what}: down {self.within_s:g} s only, shorter than one "
                                                 "reading here: not measured")  # fmt: skip
        return how

    async def _read(self, obs: ChaosBackend) -> str | None:
        names = sorted({n for link in (*self.links, *self.inside) for n in link})
        got = await obs.peer_keys(names)
        k = self.keys.get
        still = [f"{a}--{b}" for a, b in self.links if _has(got, a, k(b)) or _has(got, b, k(a))]
        if still and not self.short:
            self.last = f"{len(still)} cut link(s) still peered: {', '.join(still)}"
            return None
        crossed = [f"{a}->{b}" for (a, b), ok in zip(self.links, await obs.probe(list(self.links), _PROBE_TIMEOUT_S))
                   if ok]  # fmt: skip
        if crossed:
            self.last = f"probe(s) across the cut delivered: {', '.join(crossed)}"
            return None
        # a link inside a side is expected to carry while it exists: nodes that move may have taken it out of
        # range since the cut (docs/mobility.md), and a node gone since answers nothing
        live = obs.live_graph()
        inside = [(a, b) for a, b in self.inside
                  if live.has_edge(a, b) and got.get(a) is not None and got.get(b) is not None]
        broken = [f"{a}--{b}" for a, b in inside if not (_has(got, a, k(b)) and _has(got, b, k(a)))]
        if not broken and inside:
            carried = await obs.probe(inside, _PROBE_TIMEOUT_S)
            broken = [f"{a}->{b}" for (a, b), ok in zip(inside, carried) if not ok]
        if broken:
            self.last = f"link(s) inside a side not carrying: {', '.join(broken)}"
            return None
        shown = f"{len(self.links)} of {self.total}" if self.total > len(self.links) else f"{len(self.links)}"
        ends = "a probe over each not delivered" + ("" if still else ", dropped at both ends")
        sides = f"; {len(inside)} link(s) inside the sides still peered and carrying" if self.inside else ""
        return f"{shown} cut link(s): {ends}{sides}"


@dataclass
class _Restored(_Expect):
    """Links back (heal, link_up, a flap's last up, a link joining): peered at both ends, a probe over each
    delivered. A link with an end that is not live (dead, paused) is not expected back."""

    links: tuple[tuple[str, str], ...] = ()
    keys: Mapping[str, bytes] = field(default_factory=dict)
    total: int = 0

    async def read(self, obs: ChaosBackend, now: float) -> str | None:
        live = obs.live_graph()
        links = [(a, b) for a, b in self.links if a in live and b in live]
        if not links:
            return f"none of its {self.total} link(s) has both ends live: nothing expected back"
        got = await obs.peer_keys(sorted({n for link in links for n in link}))
        k = self.keys.get
        down = [f"{a}--{b}" for a, b in links if not (_has(got, a, k(b)) and _has(got, b, k(a)))]
        if not down:
            down = [f"{a}->{b}" for (a, b), ok in zip(links, await obs.probe(links, _PROBE_TIMEOUT_S)) if not ok]
        if down:
            self.last = f"link(s) not back: {', '.join(down)}"
            return None
        shown = f"{len(links)} of {self.total}" if self.total > len(links) else f"{len(links)}"
        return f"{shown} link(s) peered at both ends again and carrying a probe"


@dataclass
class _Shaped(_Expect):
    """A link change: the link measured in its new shape (RTT, loss, rate against the class, with the links
    check's tolerances)."""

    a: str = ""
    b: str = ""
    link_class: str | None = None
    shaping: Mapping[str, float] | None = None

    async def read(self, obs: ChaosBackend, now: float) -> str | None:
        res = await obs.measure_link(self.a, self.b, self.link_class, self.shaping)
        if res.get("pass") is None:
            self.done = Confirmation(None, None, f"{self.what}: not measured: {res.get('how', '')}")
            return None
        if not res["pass"]:
            self.last = str(res.get("how", ""))
            return None
        return str(res.get("how", "measured"))


@dataclass
class _Dropping(_Expect):
    """An adversary: it drops frames of the kinds it was told to drop, from the peer it was told (from every peer
    when none): its drop counters, or for one peer its flight recorder, move. When its bound passes and no frame of
    those kinds from that peer reached it at all, there was nothing to drop: not measured, not invalid."""

    node: str = ""
    kinds: tuple[str, ...] = ()
    peer: str | None = None
    before: tuple[int, int] | str = "not read"  # (received, dropped) by its counters before, for every peer

    async def read(self, obs: ChaosBackend, now: float) -> str | None:
        since = self.t0 if self.peer is not None else None
        got = (await obs.adversary_counts([self.node], self.kinds, self.peer, since)).get(self.node, "not read")
        if isinstance(got, str) or isinstance(self.before, str):
            why = got if isinstance(got, str) else self.before
            self.done = Confirmation(None, None, f"{self.what}: not measured: {why}")
            return None
        rx, dropped = got if self.peer is not None else (got[0] - self.before[0], got[1] - self.before[1])
        what = f"frame(s) of {', '.join(self.kinds)}" + (f" from {self.peer}" if self.peer is not None else "")
        if dropped > 0:
            return f"{self.node} dropped {dropped} of the {rx} {what} it received"
        self.last = f"{self.node} dropped none of the {rx} {what} it received"
        if rx <= 0 and obs.now() >= self.t0 + self.within_s:
            self.done = Confirmation(None, None, f"{self.what}: not measured: no {what} reached {self.node} within "
                                                 f"{self.within_s:g} s, so there was nothing to drop")  # fmt: skip
        return None


class Confirmer:
    """One step's confirmations. ``before``: every live node's state just before the step (keys and peers)."""

    def __init__(self, backend: ChaosBackend, before: Mapping[str, NodeState], poll_s: float = 0.5) -> None:
        self.backend = backend
        self.poll_s = poll_s
        self.keys: dict[str, bytes] = {n: s.key for n, s in before.items()}
        self.before = dict(before)
        self.expects: list[_Expect] = []

    def _start(self, e: _Expect) -> None:
        self.expects.append(e)
        if not self.backend.measures_faults:
            e.done = Confirmation(None, None, f"{e.what}: not measured: the {self.backend.name} backend measures no "
                                              "fault")  # fmt: skip
            return
        self.backend.beside(lambda: e.poll(self.backend), self.poll_s, e.t0 + e.within_s + READ_GRACE_S)

    def _peers_of(self, name: str) -> tuple[str, ...]:
        key = self.keys.get(name)
        return tuple(sorted(n for n, s in self.before.items() if n != name and key in s.peers))

    async def silenced(self, names: Iterable[str], action: str, for_s: float | None = None) -> list[Expectation]:
        """``names`` were killed, removed or paused (for ``for_s``) just now; the expectations started (a caller
        that brings a node back waits for its own first: :meth:`decided`)."""
        b = self.backend
        names = [n for n in names if n in self.before]  # a node that was not live has nothing to silence
        sent = await b.frames_sent(names) if b.measures_faults else {}
        started: list[Expectation] = []
        for n in names:
            peers_too = for_s is None or for_s > PEER_DEADLINE_S + self.poll_s
            within = PEER_DEADLINE_S + 2 * self.poll_s + 5.0 if peers_too else max(SILENCE_S, for_s or 0) - self.poll_s
            started.append(_Silenced(f"{action} {n}", b.now(), max(within, SILENCE_S), node=n, key=self.keys.get(n),
                                     peers=self._peers_of(n), sent0=sent.get(n), peers_too=peers_too))  # fmt: skip
            self._start(started[-1])
        return started

    async def decided(self, expects: Sequence[Expectation]) -> None:
        """Wait until each of ``expects`` is decided (at most its bound and the reading grace): a churned or paused
        node is brought back, a flapped link up, only once its fault was measured, or not, so the measurement never
        sees it undone already."""
        while any(e.done is None for e in expects):
            self._time_out()
            await self.backend.sleep(self.poll_s)

    async def back(self, names: Iterable[str], action: str) -> None:
        """``names`` came back (restart, resume, join) just now."""
        b = self.backend
        live = b.live_graph()
        if any(n not in self.keys for n in names) and b.measures_faults:  # a node that joined: its key from its state
            self.keys.update({n: s.key for n, s in (await b.states()).items()})
        for n in names:
            nbs = tuple(sorted(live.neighbors(n))) if n in live else ()
            self._start(_Back(f"{action} {n}", b.now(), BACK_S, node=n, neighbours=nbs, keys=self.keys))

    async def cut(self, links: Sequence[tuple[str, str]], action: str, groups: Sequence[set[str]] | None = None,
                  within_s: float | None = None) -> list[Expectation]:  # fmt: skip
        """``links`` were cut just now (between ``groups`` for a partition), for ``within_s`` (a flap's down); the
        expectation started (a caller that brings the links back waits for it first: :meth:`decided`)."""
        links = [(a, b) for a, b in links if a in self.keys and b in self.keys]
        if not links:
            return []
        inside: list[tuple[str, str]] = []
        if groups:
            side = {n: i for i, g in enumerate(groups) for n in g}
            live = self.backend.live_graph()
            for i in range(len(groups)):
                inside += sorted((a, b) for a, b in live.edges if side.get(a) == i == side.get(b))[:_SAMPLE // 2]
        step = max(1, len(links) // _SAMPLE)
        sample = tuple(sorted(links)[::step][:_SAMPLE])
        short = within_s is not None and within_s < PEER_DEADLINE_S
        bound = within_s if short and within_s is not None else PEER_DEADLINE_S + 2 * self.poll_s + 4.0
        cut = _Cut(action, self.backend.now(), bound, links=sample, inside=tuple(inside), keys=self.keys,
                   total=len(links), short=short)
        self._start(cut)
        return [cut]

    async def restored(self, links: Sequence[tuple[str, str]], action: str) -> None:
        """``links`` were brought back just now."""
        if any(n not in self.keys for link in links for n in link) and self.backend.measures_faults:
            self.keys.update({n: s.key for n, s in (await self.backend.states()).items()})
        if not links:
            return
        step = max(1, len(links) // _SAMPLE)
        sample = tuple(sorted(links)[::step][:_SAMPLE])
        self._start(_Restored(action, self.backend.now(), BACK_S, links=sample, keys=self.keys, total=len(links)))

    async def shaped(self, a: str, b: str, link_class: str | None, shaping: Mapping[str, float] | None) -> None:
        """The link ``a``--``b`` was given ``link_class`` (None: its class stays) with ``shaping`` just now."""
        what = f"link_change {a}--{b}" + (f" to {link_class}" if link_class else "") + (f" {dict(shaping)}" if shaping else "")
        self._start(_Shaped(what, self.backend.now(), SHAPE_S, a=a, b=b, link_class=link_class,
                            shaping=dict(shaping or {})))  # fmt: skip

    async def drops_before(self, names: Iterable[str], kinds: Iterable[str],
                           peer: str | None = None) -> dict[str, tuple[int, int] | str]:  # fmt: skip
        """What :meth:`dropping` compares with: the frames of ``kinds`` ``names`` have received and their adversaries
        dropped so far, before they are made adversaries dropping ``kinds`` (from ``peer``: nothing to read, the
        frames from it are counted from the fault on)."""
        if not self.backend.measures_faults or peer is not None:
            return {}
        return await self.backend.adversary_counts(list(names), kinds)

    async def dropping(self, names: Iterable[str], kinds: Iterable[str], before: Mapping[str, tuple[int, int] | str],
                       peer: str | None = None) -> None:  # fmt: skip
        """``names`` were made adversaries dropping ``kinds`` (from ``peer``, or every peer) just now; ``before``:
        from :meth:`drops_before`."""
        kinds = tuple(sorted(kinds))
        for n in names:
            self._start(_Dropping(f"adversary {n}" + (f" (from {peer})" if peer is not None else ""),
                                  self.backend.now(), DROP_S, node=n, kinds=kinds, peer=peer,
                                  before=(0, 0) if peer is not None else before.get(n, "not read")))  # fmt: skip

    @property
    def failed(self) -> bool:
        """Whether an expectation has already come out unconfirmed (the step will be ``invalid``)."""
        return any(e.done is not None and e.done.ok is False for e in self.expects)

    def _time_out(self) -> None:
        """Decide, as not confirmed, every expectation whose reading is still running past its bound and grace."""
        now = self.backend.now()
        for e in self.expects:
            if e.done is None and now >= e.t0 + e.within_s + READ_GRACE_S:
                e.done = Confirmation(False, None, f"{e.what}: not confirmed within {e.within_s:g} s: its reading "
                                                   f"did not return within {READ_GRACE_S:g} s more ({e.last})")  # fmt: skip

    async def settled(self, until: float | None = None) -> Confirmation | None:
        """Wait until every expectation is decided, but not past the backend time ``until`` (a reference
        sequence's next command: one undecided by then is not measured, and says so); their combination (None
        for a step that faulted nothing)."""
        b = self.backend
        while any(e.done is None for e in self.expects) and (until is None or b.now() < until):
            self._time_out()
            await b.sleep(self.poll_s if until is None else max(0.0, min(self.poll_s, until - b.now())))
        if not self.expects:
            return None
        return Confirmation.combine([e.done or Confirmation(None, None, f"{e.what}: not decided before the next "
                                                                        f"command ({e.last})") for e in self.expects])
