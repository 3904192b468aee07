"""Test kit for the sans-IO router: ordered identities, signed frames, and small networks.

Everything here drives a :class:`node.core.router.Router` through its public
inputs only (``add_peer``, ``frame_received``, ``send_traffic``,
``handle_timer``, ``remove_peer``), so a test reaches a protocol state the way
a real network would. The frames are really signed, so the router's signature
checks run for real.

* :func:`identities` gives identities sorted by public key, so a test can say
  ``low, mid, high = identities(3)`` and rely on ``low.public_key < mid.public_key``.
* :func:`announcement` / :func:`chain` build root announcements as a chain of
  nodes (root first, sender last) would produce them (PROTOCOL.md §4.5).
* :func:`bootstrap_frame`, :func:`traffic_frame`, :func:`broadcast_frame`
  build the other frame types (§4.4, §4.6, §4.7); :func:`legacy_bootstrap_frame`,
  :func:`legacy_ack_frame`, :func:`legacy_setup_frame`, :func:`legacy_teardown_frame` those of the older
  variant (§7.2, §7.4), really signed.
* :class:`Bench` wraps one router under test and runs its timers in time
  order as the clock moves; :class:`Net` shuttles frames
  between several routers (through the real codec) and runs their timers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from node.core import wire
from node.core.crypto import Identity, derive_seed
from node.core.announce import ParsedAnnouncement
from node.core.router import Router
from node.core.snek import NextHop
from node.core.state import PeerState
from node.core.types import (
    BROADCAST_HOP_LIMIT,
    INITIAL_WATERMARK,
    MAX_HOP_LIMIT,
    Announcement,
    Frame,
    FrameType,
    LegacyBootstrapPayload,
    LegacyFrameType,
    LegacyPathPayload,
    LinkType,
    Root,
    Watermark,
)

__all__ = [
    "Bench",
    "Net",
    "announcement",
    "announcements_in",
    "bootstrap_frame",
    "bootstrap_payload",
    "bootstraps_in",
    "broadcast_frame",
    "chain",
    "identities",
    "legacy_ack_frame",
    "legacy_bootstrap_frame",
    "legacy_setup_frame",
    "legacy_teardown_frame",
    "of_type",
    "peer_state",
    "traffic_frame",
    "with_bad_signature",
]

_CACHE: dict[tuple[str, int], list[Identity]] = {}


def identities(n: int, tag: str = "ruletests") -> list[Identity]:
    """``n`` deterministic identities, sorted so that ``[i].public_key < [i+1].public_key``.

    The same (n, tag) always gives the same keys. Raises ValueError when n < 1.
    """
    if n < 1:
        raise ValueError(f"identities(n) needs n >= 1, got {n}")
    hit = _CACHE.get((tag, n))
    if hit is None:
        ids = [Identity(derive_seed("routerkit", tag, i)) for i in range(n)]
        hit = _CACHE[(tag, n)] = sorted(ids, key=lambda i: i.public_key)
    return list(hit)


# ------------------------------------------------------------------ announcements (§4.5)


def announcement(root_key: bytes, root_seq: int, hops: Sequence[tuple[Identity, int]]) -> Announcement:
    """A root announcement whose hop i is signed by ``hops[i][0]`` and names port ``hops[i][1]``.

    Nothing is checked, so a test can build announcements that break the
    sanity rules of §5.3 (no hops, wrong first hop, port 0, duplicates): each
    signature is still valid over the bytes that precede its hop.
    """
    ann = Announcement(root_key, root_seq, ())
    for ident, port in hops:
        ann = wire.sign_announcement_for_port(ann, ident, port)
    return ann


def chain(path: Sequence[Identity], ports: Sequence[int] | None = None, *, root_seq: int = 1) -> Announcement:
    """The announcement ``path[-1]`` sends us when the tree path is path[0] (root) -> ... -> path[-1].

    ``ports[i]`` is the port on ``path[i]``'s switch through which it sent the
    announcement on (default: port 1 everywhere). The receiver's coordinates
    through this peer are ``tuple(ports)``; the sender's own are ``ports[:-1]``.
    Raises ValueError when ``ports`` does not match ``path`` in length.
    """
    if not path:
        raise ValueError("chain() needs at least the root")
    ports = [1] * len(path) if ports is None else list(ports)
    if len(ports) != len(path):
        raise ValueError(f"chain(): {len(path)} nodes but {len(ports)} ports")
    return announcement(path[0].public_key, root_seq, list(zip(path, ports)))


def with_bad_signature(ann: Announcement, hop_index: int) -> Announcement:
    """``ann`` with one bit of hop ``hop_index``'s signature flipped."""
    hops = list(ann.hops)
    sig = bytearray(hops[hop_index].signature)
    sig[0] ^= 0x01
    hops[hop_index] = replace(hops[hop_index], signature=bytes(sig))
    return replace(ann, hops=tuple(hops))


# ------------------------------------------------------------------ other frames


def bootstrap_payload(origin: Identity, seq: int, root: Root, *, signer: Identity | None = None) -> bytes:
    """The §4.6 payload: ``varu64(seq) ‖ root ‖ signature`` (by ``signer``, default the origin)."""
    p = wire.make_signed_root_payload(signer or origin, seq, root.key, root.seq)
    return wire.encode_signed_root_payload(p)


def bootstrap_frame(
    origin: Identity,
    seq: int,
    root: Root,
    *,
    watermark: Watermark = INITIAL_WATERMARK,
    signer: Identity | None = None,
    payload: bytes | None = None,
) -> Frame:
    """A Bootstrap (type 2) from ``origin``: DestinationKey = origin's key (§4.4)."""
    body = bootstrap_payload(origin, seq, root, signer=signer) if payload is None else payload
    return Frame(FrameType.BOOTSTRAP, destination_key=origin.public_key, watermark=watermark, payload=body)


def traffic_frame(
    dest: bytes,
    source: bytes,
    payload: bytes = b"data",
    *,
    dest_coords: tuple[int, ...] = (),
    source_coords: tuple[int, ...] = (),
    watermark: Watermark = INITIAL_WATERMARK,
    hop_limit: int = MAX_HOP_LIMIT,
) -> Frame:
    """A Traffic (type 3) frame as it would arrive from a peer."""
    return Frame(
        FrameType.TRAFFIC,
        hop_limit=hop_limit,
        destination_key=dest,
        source_key=source,
        destination_coords=dest_coords,
        source_coords=source_coords,
        watermark=watermark,
        payload=payload,
    )


def broadcast_frame(
    source: Identity,
    seq: int,
    root: Root,
    *,
    hop_limit: int = BROADCAST_HOP_LIMIT,
    signer: Identity | None = None,
) -> Frame:
    """A WakeupBroadcast (type 4) from ``source`` carrying ``root`` (§4.7)."""
    p = wire.make_signed_root_payload(signer or source, seq, root.key, root.seq)
    return Frame(
        FrameType.WAKEUP_BROADCAST,
        hop_limit=hop_limit,
        source_key=source.public_key,
        payload=wire.encode_signed_root_payload(p),
    )


def legacy_bootstrap_frame(
    origin: Identity,
    path_id: bytes,
    root: Root,
    coords: tuple[int, ...] = (),
    *,
    signer: Identity | None = None,
) -> Frame:
    """A LegacyBootstrap (0xE0) from ``origin`` at ``coords``; source sig by ``signer`` (default the origin)."""
    sig = (signer or origin).sign(wire.legacy_source_signed_bytes(origin.public_key, path_id))
    payload = wire.encode_legacy_bootstrap_payload(LegacyBootstrapPayload(path_id, root.key, root.seq, sig))
    return Frame(LegacyFrameType.LEGACY_BOOTSTRAP, destination_key=origin.public_key, source_coords=coords,
                 payload=payload)  # fmt: skip


def _path_payload(
    low: Identity, high: Identity, path_id: bytes, root: Root, low_signer: Identity | None, high_signer: Identity | None
) -> bytes:
    """A LegacyPathPayload for the path (low, path_id) acknowledged by ``high``, both signatures real (§7.2)."""
    ssig = (low_signer or low).sign(wire.legacy_source_signed_bytes(low.public_key, path_id))
    dsig = (high_signer or high).sign(wire.legacy_dest_signed_bytes(ssig, low.public_key, path_id))
    return wire.encode_legacy_path_payload(LegacyPathPayload(path_id, root.key, root.seq, ssig, dsig))


def legacy_ack_frame(
    bootstrapper: Identity,
    acker: Identity,
    path_id: bytes,
    root: Root,
    *,
    dest_coords: tuple[int, ...],
    source_coords: tuple[int, ...],
    source_signer: Identity | None = None,
    dest_signer: Identity | None = None,
) -> Frame:
    """A LegacyBootstrapACK (0xE1) from ``acker`` to ``bootstrapper`` at ``dest_coords``."""
    return Frame(
        LegacyFrameType.LEGACY_BOOTSTRAP_ACK,
        destination_key=bootstrapper.public_key,
        source_key=acker.public_key,
        destination_coords=dest_coords,
        source_coords=source_coords,
        payload=_path_payload(bootstrapper, acker, path_id, root, source_signer, dest_signer),
    )


def legacy_setup_frame(
    bootstrapper: Identity,
    acker: Identity,
    path_id: bytes,
    root: Root,
    *,
    dest_coords: tuple[int, ...],
    source_signer: Identity | None = None,
    dest_signer: Identity | None = None,
) -> Frame:
    """A LegacySetup (0xE2) from ``bootstrapper`` to ``acker`` at ``dest_coords``."""
    return Frame(
        LegacyFrameType.LEGACY_SETUP,
        destination_key=acker.public_key,
        source_key=bootstrapper.public_key,
        destination_coords=dest_coords,
        payload=_path_payload(bootstrapper, acker, path_id, root, source_signer, dest_signer),
    )


def legacy_teardown_frame(path_key: bytes, path_id: bytes) -> Frame:
    """A LegacyTeardown (0xE3) for the path (``path_key``, ``path_id``)."""
    return Frame(LegacyFrameType.LEGACY_TEARDOWN, destination_key=path_key,
                 payload=wire.encode_legacy_teardown_payload(path_id))  # fmt: skip


def peer_state(
    port: int,
    key: bytes,
    link_type: int,
    ann: Announcement | None = None,
    *,
    order: int = 0,
    received_at: float = 0.0,
    up: bool = True,
) -> PeerState:
    """A PeerState holding ``ann`` (unsigned is fine), for the pure next-hop functions.

    Only for states the Router cannot be driven into (say so at the call
    site). Goes through ``PeerState.store`` so the derived fields stay
    consistent.
    """
    q = PeerState(port, key, link_type, up=up)
    if ann is not None:
        q.store(ParsedAnnouncement.full(ann, wire.encode_announcement(ann)), received_at, order)
    return q


# ------------------------------------------------------------------ outbox views


def of_type(out: Iterable[tuple[int, Frame]], ftype: int) -> list[tuple[int, Frame]]:
    """The ``(port, frame)`` pairs of one frame type, in outbox order."""
    return [(p, f) for p, f in out if f.type == ftype]


def announcements_in(out: Iterable[tuple[int, Frame]]) -> list[tuple[int, Announcement]]:
    """Decoded and signature-checked announcements in an outbox, as ``(port, announcement)``.

    Raises MalformedFrame or BadSignature if the router sent a bad one.
    """
    res = []
    for port, f in of_type(out, FrameType.TREE_ANNOUNCEMENT):
        ann = wire.decode_announcement(f.payload)
        wire.verify_announcement(ann)
        res.append((port, ann))
    return res


def bootstraps_in(out: Iterable[tuple[int, Frame]]) -> list[tuple[int, Frame]]:
    return of_type(out, FrameType.BOOTSTRAP)


class Bench:
    """One Router under test, driven only through its public inputs.

    ``now`` is the protocol time used by every input; move it with :meth:`at`,
    which first runs every timer due by then, in time order, as a shell would.
    Frames the router emits because of an input collect in :meth:`drain`;
    frames its timers emit go to ``log`` only, as ``(time, port, frame)``
    (:meth:`tick` returns them).
    """

    def __init__(self, me: Identity, now: float = 0.0, **router_kw: object) -> None:
        self.me = me
        self.now = now
        self.r = Router(me, now, **router_kw)  # type: ignore[arg-type]
        self.r.outbox.clear()
        self.log: list[tuple[float, int, Frame]] = []
        self._pending: list[tuple[int, Frame]] = []

    @property
    def key(self) -> bytes:
        return self.me.public_key

    def _collect(self, *, pending: bool) -> None:
        for port, frame in self.r.outbox:
            self.log.append((self.now, port, frame))
            if pending:
                self._pending.append((port, frame))
        self.r.outbox.clear()

    def at(self, t: float, *, timers: bool = True) -> Bench:
        """Move the clock to ``t``, first running every timer due at or before ``t``.

        ``timers=False`` models an input that arrives at ``t`` just before the
        timers due at ``t`` fire. Raises ValueError if ``t`` is in the past.
        """
        if t < self.now:
            raise ValueError(f"time goes forward only: {t} < {self.now}")
        self._collect(pending=True)  # anything a direct call on self.r left behind
        for _ in range(10_000_000):
            due = self.r.next_deadline()
            if not timers or due > t:
                break
            self.now = max(self.now, due)
            self.r.handle_timer(self.now)
            self._collect(pending=False)
        else:  # pragma: no cover
            raise AssertionError(f"router timers never moved past {t}")
        self.now = t
        return self

    def tick(self, until: float) -> list[tuple[float, int, Frame]]:
        """:meth:`at` ``until``; returns ``(time, port, frame)`` for what the timers sent."""
        self._collect(pending=True)
        start = len(self.log)
        self.at(until)
        return self.log[start:]

    def connect(self, peer: Identity, link_type: int = LinkType.REMOTE) -> int:
        """``add_peer``; returns the port. The greeting announcement goes to :meth:`drain`."""
        port = self.r.add_peer(peer.public_key, link_type, self.now)
        assert port is not None, "no free port"
        self._collect(pending=True)
        return port

    def announce(self, port: int, ann: Announcement) -> None:
        """Deliver a tree announcement on ``port``."""
        self.send(port, wire.announcement_frame(ann))

    def join(
        self,
        peer: Identity,
        path_above: Sequence[Identity] = (),
        *,
        ports: Sequence[int] | None = None,
        root_seq: int = 1,
        link_type: int = LinkType.REMOTE,
    ) -> int:
        """Connect ``peer`` and have it announce the path ``path_above + [peer]`` (root first).

        With an empty ``path_above`` the peer announces itself as root. Returns the port.
        """
        port = self.connect(peer, link_type)
        self.announce(port, chain([*path_above, peer], ports, root_seq=root_seq))
        return port

    def send(self, port: int, frame: Frame) -> None:
        """Deliver ``frame`` as received on ``port`` at ``now``."""
        self.r.frame_received(port, frame, self.now)
        self._collect(pending=True)

    def drain(self) -> list[tuple[int, Frame]]:
        """Take what the inputs since the last drain made the router send (timers excluded)."""
        self._collect(pending=True)
        out, self._pending = self._pending, []
        return out

    def hop(self, dest: bytes, *, bootstrap: bool = False, wm: Watermark = INITIAL_WATERMARK) -> NextHop:
        """``snek_next_hop`` at the current time."""
        return self.r.snek_next_hop(dest, bootstrap, wm, self.now)


# ------------------------------------------------------------------ several routers


class Net:
    """Routers wired port to port, with zero-latency delivery through the real codec.

    ``links`` are pairs of indexes into ``ids``. Frames are encoded with
    ``wire.encode_frame`` and decoded again before delivery, so what crosses a
    link is exactly what would cross a stream. Disconnects on one side remove
    the peer on the other side too. ``tap`` records every delivered frame as
    ``(from router, to router, frame)``.
    """

    def __init__(
        self,
        ids: Sequence[Identity],
        links: Iterable[tuple[int, int]],
        *,
        now: float = 0.0,
        link_type: int = LinkType.PIPE,
        **router_kw: object,
    ) -> None:
        self.now = now
        self.routers = [Router(i, now, **router_kw) for i in ids]  # type: ignore[arg-type]
        self.wires: dict[tuple[int, int], tuple[int, int]] = {}
        self.tap: list[tuple[int, int, Frame]] = []
        for a, b in links:
            pa = self.routers[a].add_peer(ids[b].public_key, link_type, now)
            pb = self.routers[b].add_peer(ids[a].public_key, link_type, now)
            assert pa is not None and pb is not None
            self.wires[(a, pa)] = (b, pb)
            self.wires[(b, pb)] = (a, pa)
        self.pump()

    @classmethod
    def line(cls, ids: Sequence[Identity], **kw: object) -> Net:
        """ids[0] - ids[1] - ... - ids[-1]."""
        return cls(ids, [(i, i + 1) for i in range(len(ids) - 1)], **kw)  # type: ignore[arg-type]

    def cut(self, a: int, port: int) -> None:
        """Take down the link on router ``a``'s ``port``: both ends see the peer go (§3.7)."""
        b, far_port = self.wires.pop((a, port))
        self.wires.pop((b, far_port))
        self.routers[a].remove_peer(port, self.now, "cut")
        self.routers[b].remove_peer(far_port, self.now, "cut")
        self.pump()

    def pump(self, max_frames: int = 100_000) -> int:
        """Deliver every queued frame (and what that causes) at ``now``. Returns how many."""
        n = 0
        while True:
            moved = False
            for i, r in enumerate(self.routers):
                for port, reason in r.disconnects:
                    far = self.wires.pop((i, port), None)
                    if far is not None:
                        self.wires.pop(far, None)
                        self.routers[far[0]].remove_peer(far[1], self.now, f"remote:{reason}")
                r.disconnects.clear()
                if not r.outbox:
                    continue
                out = list(r.outbox)
                r.outbox.clear()
                for port, frame in out:
                    far = self.wires.get((i, port))
                    if far is None:
                        continue
                    got = wire.decode_frame(wire.encode_frame(frame))
                    self.tap.append((i, far[0], got))
                    self.routers[far[0]].frame_received(far[1], got, self.now)
                    n += 1
                    moved = True
                    if n > max_frames:
                        raise AssertionError(f"more than {max_frames} frames at t={self.now}: a forwarding loop?")
            if not moved:
                return n

    def run_until(self, t_end: float) -> None:
        """Advance every router's timers in time order up to ``t_end``, pumping after each step."""
        while True:
            t = min(r.next_deadline() for r in self.routers)
            if t > t_end:
                break
            self.now = max(self.now, t)
            for r in self.routers:
                if r.next_deadline() <= self.now:
                    r.handle_timer(self.now)
            self.pump()
        self.now = max(self.now, t_end)
