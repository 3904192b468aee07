"""The older SNEK variant (PROTOCOL.md §7; seeds 002/003): explicit ascending and descending paths.

:class:`SnekLegacy` is the :class:`~node.core.snek_api.SnekStrategy` of variant ``legacy``
(:data:`node.core.variants.VARIANTS`). Each node keeps an **ascending** path, to the next-higher key, and
a **descending** path, to the next-lower key, both entries of one table indexed by (path key, path ID)
(§7.1). A path is set up by a four-message exchange on the experimental encoding of §7.4, all on the
router's protocol queue:

* **Bootstrap** (0xE0), sent by :meth:`SnekLegacy.maintain` when there is no ascending entry or its root
  is not ours (root nodes never bootstrap); SNEK-routed with the older next-hop rule (§7.3.1,
  :meth:`SnekLegacy.next_hop`) to its dead end, the lowest known key above the bootstrapper;
* **Bootstrap ACK** (0xE1), from the dead end, tree-routed back to the bootstrap's source coordinates;
* **Path setup** (0xE2), from the bootstrapper, tree-routed to the acker and processed at every hop
  (§7.3.2): each hop installs an entry whose source port points back towards the lower key;
* **Teardown** (0xE3), hop by hop along the stored ports (§7.3.4).

Entries are hard state: they expire only after ``entry_expiry`` (the knob; 1 h by default for this
variant) and are never refreshed. There are no watermarks: :meth:`SnekLegacy.next_hop` ignores the one it
is given and returns ``(FullMask, 0)``, so SNEK-routed Traffic carries that on the wire (§7.4). A Bootstrap
of type 2 is never sent, and one received is dropped and counted as
``("frame_dropped", 2, "legacy_mode")`` (§7.4).

Knobs honoured: ``entry_expiry`` (the lifetime of every path entry). ``bootstrap_interval`` and
``root_filter`` are ignored: this variant bootstraps on demand (no ascending path, a root change, a torn
down ascending path), and its paths are set up under one root and torn down explicitly, so there is no
stale-root route to filter. ``hop_limiting`` and ``wakeup_broadcasts`` are the router's and apply as usual.

Decisions where §7 leaves room:

* **Path IDs** are "8 random bytes, never reused" (§7.1). The sans-IO core has no randomness source, so a
  path ID is derived: the first 8 bytes of BLAKE2b over (own key ‖ wall-clock ms ‖ a per-router counter
  that never resets, not even on a full reset). A simulation therefore stays a pure function of its seed,
  and one router never repeats an ID; a restarted node with the same key differs by its wall clock.
* Expired entries that are neither the ascending nor the descending one are deleted silently at the
  maintenance tick (the endpoints tear their own paths down; this only bounds memory). New transit
  entries beyond ``max_routes`` are refused with a rejected-path teardown.
* A peer going away deletes every entry through it and sends a teardown out of the entry's other port
  (the RECOMMENDED part of §7.3.4); a lost ascending path is re-bootstrapped at the next tick, once the
  tree has dealt with the same loss.
* A bootstrap that dead-ends at its own originator is not acknowledged; a Bootstrap ACK is acted on
  only where tree routing reaches its destination coordinates (§7.3.1), and an ACK or setup that tree
  routing cannot move on is dropped and counted as ``no_route`` (a setup with a teardown back).
* A duplicate Path setup (§7.3.2 step 2) sends the rejected-path teardown to the arrival port only if
  tearing the existing entry down did not already send one there.

Convergence: §7 as written needed no deviation. In the in-process simulator (``snekbed sim --variant
legacy``) it converges, and re-converges after ``--kill-root``, on the Pinecone graphs (graph-250,
graph-250-2, grid4-0049, line-0050: every sampled ping delivered) and on 100-node mixed meshes
(``generators.mesh_mixed``, seeds 0-9: the few lost pings were dropped by full bluetooth link queues, or
met the short-lived cycles below). What the variant does not protect against, by design of §7:

* There is no loop guard: no watermark, and the legacy frames' hop limit is 0. Only a 2-hop loop is
  caught (the next hop is the arrival port, §6.5 step 4). While paths are being replaced (after a root
  change every node re-bootstraps, §7.3.1 step 3) a frame can follow a longer, short-lived cycle.
* Hard state assumes reliable links: a lost Path setup or Teardown leaves a partial or stale path until
  it expires (the in-process backend's shaped links can drop frames when their queue is full).
* SNEK-routed Traffic must carry ``(FullMask, 0)`` as §7.4 says; the router's shared §6.5 step 4 still
  drops a frame that carries a lower watermark (no conforming legacy node sends one).

Observation: ``descending_changed`` is emitted as :mod:`node.core.snek_reference` does (the descending
key set, cleared, or changed); ``bootstrap_sent`` (its ``seq`` is the router's path counter),
``bootstrap_accepted`` and ``bootstrap_rejected`` (at a bootstrap's dead end) only with ``detail_events``.
Everything else is counted in ``host.counters``: ``("bootstrap_sent",)``, ``("bootstrap_ack_sent",)``,
``("ack_rejected", reason)``, ``("setup_sent",)``, ``("setup_rejected", reason)``, ``("path_installed",
role)``, ``("teardown_sent",)``, ``("teardown_received",)`` and ``("frame_dropped", type, reason)``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, Final

from . import crypto, wire
from .errors import ProtocolError
from .reasons import count_drop
from .snek import NONE_PORT, NextHop
from .snek_api import SnekHost, descending_moved
from .state import PeerState
from .types import (
    INITIAL_WATERMARK,
    LOCAL_PORT,
    Frame,
    FrameType,
    LegacyBootstrapPayload,
    LegacyFrameType,
    LegacyPathPayload,
    Root,
    Watermark,
)

__all__ = ["LEGACY_EXPIRY_S", "PathEntry", "PathTable", "SnekLegacy"]

LEGACY_EXPIRY_S: Final = 3600.0  # §7.4: path expiry 1 h

_BOOT: Final = int(LegacyFrameType.LEGACY_BOOTSTRAP)
_ACK: Final = int(LegacyFrameType.LEGACY_BOOTSTRAP_ACK)
_SETUP: Final = int(LegacyFrameType.LEGACY_SETUP)
_TEARDOWN: Final = int(LegacyFrameType.LEGACY_TEARDOWN)
_TYPE2: Final = int(FrameType.BOOTSTRAP)


@dataclass(slots=True)
class PathEntry:
    """One path entry (§7.1). ``source`` is LOCAL_PORT for our own ascending path; ``destination`` is
    NONE_PORT at the path's far end (the descending entry)."""

    path_key: bytes
    path_id: bytes
    origin: bytes  # the node at the far end: the acker for our ascending entry, else the path key
    source: int  # towards the lower key (the path key)
    destination: int  # towards the higher key (the acker)
    last_seen: float
    root: Root
    ttl: float = LEGACY_EXPIRY_S

    @property
    def key(self) -> bytes:
        """The node this entry leads to (what observers and ``/state`` show): the origin key."""
        return self.origin

    @property
    def ident(self) -> tuple[bytes, bytes]:
        return (self.path_key, self.path_id)

    def valid(self, now: float) -> bool:
        return now - self.last_seen < self.ttl

    @property
    def expires_at(self) -> float:
        return self.last_seen + self.ttl


class PathTable:
    """The routing table of §7.1: (path key, path ID) -> :class:`PathEntry`."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[tuple[bytes, bytes], PathEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[PathEntry]:
        return iter(self._entries.values())

    def get(self, path_key: bytes, path_id: bytes) -> PathEntry | None:
        return self._entries.get((path_key, path_id))

    def install(self, entry: PathEntry) -> None:
        self._entries[entry.ident] = entry

    def remove(self, entry: PathEntry) -> bool:
        """Remove ``entry`` itself (not another entry with the same ident). True when it was there."""
        if self._entries.get(entry.ident) is entry:
            del self._entries[entry.ident]
            return True
        return False


class SnekLegacy:
    """§7 on a router. Built once per router: ``SnekLegacy(host, now)``."""

    frame_types: ClassVar[frozenset[int]] = frozenset((*(int(t) for t in LegacyFrameType), _TYPE2))

    def __init__(self, host: SnekHost, now: float) -> None:
        self.host = host
        self._paths_made = 0  # path ID counter: never reset, so a router never reuses an ID (§7.1)
        self.reset(now)

    def reset(self, now: float) -> None:
        self.expiry_s = float(self.host.knobs.get("entry_expiry", LEGACY_EXPIRY_S))
        self.table = PathTable()
        self.ascending: PathEntry | None = None
        self.descending: PathEntry | None = None
        self._peers: list[tuple[int, PeerState]] | None = None  # up peers with an announcement, by port
        self._next_expiry = float("inf")

    # ------------------------------------------------------------------ the seam

    def next_hop(self, dest: bytes, bootstrap: bool, wm: Watermark, now: float) -> NextHop:
        """§7.3.1 "next hop (older rules)": §6.3 with no watermark, ``best_port`` starting local for every
        frame, and steps 6-7 replaced by one offer per valid table entry whose source port is remote and up.

        ``wm`` is ignored; the returned watermark is always ``(FullMask, 0)``. A bootstrap with no better
        candidate than our own key gets LOCAL_PORT: it has reached its dead end here.
        """
        h = self.host
        own = h.key
        if not bootstrap and dest == own:  # 1
            return NextHop(LOCAL_PORT, INITIAL_WATERMARK)
        best_key, best_port = own, LOCAL_PORT  # 2
        exact = not bootstrap
        peers = h.peers
        parent = h.parent
        pp = peers.get(parent) if parent is not None else None
        if parent is not None and pp is not None and pp.up:  # 3
            root_key = h.root.key
            if (bootstrap and own == dest) or own < dest < root_key:
                best_key, best_port = root_key, parent
            if pp.announcement is not None:
                for k in pp.hop_keys:
                    if (exact and k == dest and best_key != dest) or dest < k < best_key:
                        best_key, best_port = k, parent
        announced = self._announced()
        for port, q in announced:  # 4
            for k in q.hop_keys:
                if (exact and k == dest and best_key != dest) or dest < k < best_key:
                    best_key, best_port = k, port
        for port, q in announced:  # 5: the last port examined wins
            if q.key == best_key:
                best_port = port
        for e in self.table:  # 6-7 of the older rules
            src = e.source
            if src == LOCAL_PORT or now - e.last_seen >= e.ttl:
                continue
            k = e.path_key
            if (exact and k == dest and best_key != dest) or dest < k < best_key:
                src_peer = peers.get(src)
                if src_peer is not None and src_peer.up:
                    best_key, best_port = k, src
        return NextHop(best_port, INITIAL_WATERMARK)

    def peers_changed(self) -> None:
        self._peers = None

    def peer_removed(self, port: int, now: float) -> None:
        """§3.7 and §7.3.4: delete every entry that uses ``port``; tear each down out of its other port."""
        doomed = [e for e in self.table if e.source == port or e.destination == port]
        for e in doomed:
            self._forget(e, now)
            other = e.destination if e.source == port else e.source
            if other > 0 and other != port:
                self._send_teardown(e, other)

    def bootstrap_soon(self, now: float) -> None:
        """Nothing to do: a parent change that matters changes our root, and :meth:`maintain` re-bootstraps
        on a root change (§7.3.1 step 3); a path, once set up, does not depend on the tree."""

    def routes_valid_until(self) -> float:
        return min((e.expires_at for e in self.table if e.source != LOCAL_PORT), default=float("inf"))

    def next_deadline(self) -> float:
        return float("inf")  # the maintenance tick is all it needs

    def maintain(self, now: float) -> None:
        """§7.3.1 maintenance: tear down an expired ascending or descending path, then bootstrap if there
        is no ascending path or its root is not ours (root nodes never bootstrap)."""
        a = self.ascending
        if a is not None and not a.valid(now):
            self._teardown_local(a, now)
        d = self.descending
        if d is not None and not d.valid(now):
            self._teardown_local(d, now)
        if now >= self._next_expiry:
            self._expire(now)
        a = self.ascending
        if self.host.parent is not None and (a is None or a.root != self.host.root):
            self.bootstrap_now(now)

    def frame_received(self, port: int, frame: Frame, now: float) -> None:
        t = frame.type
        if t == _BOOT:
            self._on_bootstrap(port, frame, now)
        elif t == _ACK:
            self._on_ack(port, frame, now)
        elif t == _SETUP:
            self._on_setup(port, frame, now)
        elif t == _TEARDOWN:
            self._on_teardown(port, frame, now)
        else:  # type 2: never sent in legacy mode, and dropped on receipt (§7.4)
            self._drop(t, "legacy_mode")

    # ------------------------------------------------------------------ §7.3.1 bootstrap

    def bootstrap_now(self, now: float) -> None:
        """Send a Bootstrap (0xE0) for a fresh path ID towards our own key. Does nothing for a root."""
        h = self.host
        if h.parent is None:
            return
        own = h.key
        root = h.root
        path_id = self._new_path_id(now)
        sig = h.identity.sign(wire.legacy_source_signed_bytes(own, path_id))
        payload = wire.encode_legacy_bootstrap_payload(LegacyBootstrapPayload(path_id, root.key, root.seq, sig))
        nh = self.next_hop(own, True, INITIAL_WATERMARK, now).port
        if nh <= 0:
            h.counters[("bootstrap_dead_end",)] += 1  # the parent is not up: nowhere to send it
            return
        h.outbox.append((nh, Frame(_BOOT, destination_key=own, source_coords=h.coords, payload=payload)))
        h.counters[("bootstrap_sent",)] += 1
        if h.detail_events:
            h.emit("bootstrap_sent", seq=self._paths_made, port=nh)

    def _new_path_id(self, now: float) -> bytes:
        self._paths_made += 1
        h = self.host
        material = h.key + h.wall_ms(now).to_bytes(8, "big") + self._paths_made.to_bytes(8, "big")
        return hashlib.blake2b(material, digest_size=8, person=b"snekbed-legacy").digest()

    def _on_bootstrap(self, port: int, frame: Frame, now: float) -> None:
        """Forward a bootstrap with the older next-hop rule; at its dead end, answer with an ACK."""
        h = self.host
        path_key = frame.destination_key
        nh = self.next_hop(path_key, True, INITIAL_WATERMARK, now).port
        if nh > 0:
            if nh == port:
                self._drop(_BOOT, "loop")
            else:
                h.outbox.append((nh, frame))
            return
        reason = self._dead_end(port, frame, now)
        if reason is not None:
            h.counters[("bootstrap_rejected", reason)] += 1
            if h.detail_events:
                h.emit("bootstrap_rejected", origin=path_key.hex(), reason=reason)

    def _dead_end(self, port: int, frame: Frame, now: float) -> str | None:
        """§7.3.1 "at the dead end": check, then send a signed ACK tree-routed to the source coordinates.
        Returns None when an ACK went out, else why not."""
        h = self.host
        path_key = frame.destination_key
        if path_key == h.key:
            return "own_bootstrap"
        try:
            p = wire.decode_legacy_bootstrap_payload(frame.payload)
        except ProtocolError:
            return "malformed"
        if not crypto.verify(path_key, wire.legacy_source_signed_bytes(path_key, p.path_id), p.source_sig):
            return "bad_signature"
        root = h.root
        if p.root != root:
            return "root_mismatch"
        to = h.tree_next_hop(frame.source_coords, LOCAL_PORT)
        if to is None or to == LOCAL_PORT:
            return "no_route"
        dest_sig = h.identity.sign(wire.legacy_dest_signed_bytes(p.source_sig, path_key, p.path_id))
        payload = LegacyPathPayload(p.path_id, root.key, root.seq, p.source_sig, dest_sig)
        ack = Frame(
            _ACK,
            destination_key=path_key,
            source_key=h.key,
            destination_coords=frame.source_coords,
            source_coords=h.coords,
            payload=wire.encode_legacy_path_payload(payload),
        )
        h.outbox.append((to, ack))
        h.counters[("bootstrap_ack_sent",)] += 1
        if h.detail_events:
            h.emit("bootstrap_accepted", origin=path_key.hex(), from_port=port, to_port=to)
        return None

    def _on_ack(self, port: int, frame: Frame, now: float) -> None:
        """Tree-route a Bootstrap ACK; where it reaches its coordinates, run §7.3.1's acceptance."""
        h = self.host
        to = h.tree_next_hop(frame.destination_coords, port)
        if to is None:
            self._drop(_ACK, "no_route")
            return
        if to != LOCAL_PORT:
            h.outbox.append((to, frame))
            return
        reason = self._accept_ack(frame, now)
        if reason is not None:
            h.counters[("ack_rejected", reason)] += 1

    def _accept_ack(self, frame: Frame, now: float) -> str | None:
        """§7.3.1 "receiving a Bootstrap ACK", steps 1-6. None when the path setup went out."""
        h = self.host
        own = h.key
        try:
            p = wire.decode_legacy_path_payload(frame.payload, _ACK)
        except ProtocolError:
            return "malformed"
        src = frame.source_key
        if not (
            crypto.verify(own, wire.legacy_source_signed_bytes(own, p.path_id), p.source_sig)
            and crypto.verify(src, wire.legacy_dest_signed_bytes(p.source_sig, own, p.path_id), p.dest_sig)
        ):
            return "bad_signature"
        if src == own:
            return "from_self"
        pp = h.peers.get(h.parent) if h.parent is not None else None
        if pp is None or pp.root is None or p.root != pp.root:
            return "root_mismatch"  # the root of our parent's last announcement (key and sequence)
        a = self.ascending
        if a is not None and a.valid(now):
            ok = (src == a.origin and p.path_id != a.path_id) or own < src < a.origin
        else:
            ok = src > own
        if not ok:
            return "not_closer"
        to = h.tree_next_hop(frame.source_coords, LOCAL_PORT)
        if to is None or to == LOCAL_PORT:
            return "no_route"  # nothing installed yet: nothing to tear down
        root = pp.root
        setup = Frame(
            _SETUP,
            destination_key=src,
            source_key=own,
            destination_coords=frame.source_coords,
            payload=wire.encode_legacy_path_payload(
                LegacyPathPayload(p.path_id, root.key, root.seq, p.source_sig, p.dest_sig)
            ),
        )
        h.outbox.append((to, setup))
        h.counters[("setup_sent",)] += 1
        for e in [e for e in self.table if e.source == LOCAL_PORT and e.path_key != src]:
            self._teardown_local(e, now)  # first: our previous ascending paths (step 5)
        entry = PathEntry(own, p.path_id, src, LOCAL_PORT, to, now, p.root, self.expiry_s)
        self._install(entry, now)
        self.ascending = entry  # then the new one (step 6)
        h.counters[("path_installed", "ascending")] += 1
        return None

    # ------------------------------------------------------------------ §7.3.2 path setup

    def _on_setup(self, port: int, frame: Frame, now: float) -> None:
        reason = self._setup(port, frame, now)
        if reason is not None:
            self.host.counters[("setup_rejected", reason)] += 1

    def _setup(self, port: int, frame: Frame, now: float) -> str | None:
        """§7.3.2 at this hop. None when the setup was forwarded or accepted here, else the reason."""
        h = self.host
        own = h.key
        try:
            p = wire.decode_legacy_path_payload(frame.payload, _SETUP)
        except ProtocolError:
            return "malformed"  # no path ID to tear down: dropped
        src, dst, pid = frame.source_key, frame.destination_key, p.path_id
        if not (
            crypto.verify(src, wire.legacy_source_signed_bytes(src, pid), p.source_sig)
            and crypto.verify(dst, wire.legacy_dest_signed_bytes(p.source_sig, src, pid), p.dest_sig)
        ):
            self._reject_back(src, pid, port)
            return "bad_signature"
        if p.root != h.root:
            self._reject_back(src, pid, port)
            return "root_mismatch"
        old = self.table.get(src, pid)
        if old is not None:  # a duplicate: tear down both ways, and the new one back (step 2)
            self._teardown_local(old, now)
            if port not in (old.source, old.destination):
                self._reject_back(src, pid, port)
            return "duplicate"
        if dst == own:  # we are the endpoint (step 3)
            d = self.descending
            if not src < own:
                ok = False
            elif d is not None and d.valid(now):
                ok = (src == d.path_key and pid != d.path_id) or d.path_key < src < own
            else:
                ok = True
            if not ok:
                self._reject_back(src, pid, port)
                return "not_closer"
            if d is not None:  # tear down the previous descending path (it stays the reference until replaced)
                self.table.remove(d)
                self._send_teardowns(d)
            entry = PathEntry(src, pid, src, port, NONE_PORT, now, p.root, self.expiry_s)
            self._install(entry, now)
            self._set_descending(entry, now)
            h.counters[("path_installed", "descending")] += 1
            return None
        to = h.tree_next_hop(frame.destination_coords, port)  # an intermediate hop (step 4)
        if to is None or to == LOCAL_PORT:
            self._reject_back(src, pid, port)
            return "no_route"
        if len(self.table) >= h.max_routes:
            self._reject_back(src, pid, port)
            return "table_full"  # bounded memory against setups from made-up keys
        h.outbox.append((to, frame))
        self._install(PathEntry(src, pid, src, port, to, now, p.root, self.expiry_s), now)  # after forwarding
        h.counters[("path_installed", "transit")] += 1
        return None

    # ------------------------------------------------------------------ §7.3.4 teardown

    def _on_teardown(self, port: int, frame: Frame, now: float) -> None:
        h = self.host
        try:
            pid = wire.decode_legacy_teardown_payload(frame.payload)
        except ProtocolError:
            self._drop(_TEARDOWN, "malformed")
            return
        e = self.table.get(frame.destination_key, pid)
        if e is None:
            for ref in (self.ascending, self.descending):  # always in the table too; checked as §7.3.4 says
                if ref is not None and ref.ident == (frame.destination_key, pid):
                    e = ref
        if e is None:
            self._drop(_TEARDOWN, "unknown_path")  # step 1: not forwarded
            return
        if port != e.source and port != e.destination:
            self._drop(_TEARDOWN, "foreign_port")  # step 2
            return
        h.counters[("teardown_received",)] += 1
        was_ascending = e is self.ascending
        self._forget(e, now)  # step 3
        if port == e.source and e.destination > 0:  # step 4
            self._send_teardown(e, e.destination)
        elif port == e.destination and e.source > 0:
            self._send_teardown(e, e.source)
        if was_ascending:
            self.bootstrap_now(now)  # step 6: at once

    def _teardown_local(self, e: PathEntry, now: float) -> None:
        """§7.3.4 step 5: forget ``e`` and send a teardown to each of its remote ports."""
        self._forget(e, now)
        self._send_teardowns(e)

    def _send_teardowns(self, e: PathEntry) -> None:
        for port in (e.source, e.destination):
            if port > 0:
                self._send_teardown(e, port)

    def _send_teardown(self, e: PathEntry, port: int) -> None:
        self._reject_back(e.path_key, e.path_id, port)

    def _reject_back(self, path_key: bytes, path_id: bytes, port: int) -> None:
        """A Teardown (0xE3) for (path key, path ID) to ``port`` (also the rejected-path teardown of §7.3.2)."""
        frame = Frame(_TEARDOWN, destination_key=path_key, payload=wire.encode_legacy_teardown_payload(path_id))
        self.host.outbox.append((port, frame))
        self.host.counters[("teardown_sent",)] += 1

    # ------------------------------------------------------------------ state

    def _announced(self) -> list[tuple[int, PeerState]]:
        """Up peers with a stored announcement, in ascending port order (rebuilt after peers_changed)."""
        if self._peers is None:
            peers = self.host.peers
            self._peers = [(p, peers[p]) for p in sorted(peers) if peers[p].up and peers[p].announcement is not None]
        return self._peers

    def _install(self, entry: PathEntry, now: float) -> None:
        self.table.install(entry)
        self._next_expiry = min(self._next_expiry, entry.expires_at)

    def _forget(self, e: PathEntry, now: float) -> None:
        """Remove ``e`` from the table and from the ascending/descending references (no teardown)."""
        self.table.remove(e)
        if e is self.ascending:
            self.ascending = None
        if e is self.descending:
            self._set_descending(None, now)

    def _expire(self, now: float) -> None:
        """Silently delete expired entries (not the ascending/descending ones: maintain tore those down)."""
        first = float("inf")
        for e in list(self.table):
            if not e.valid(now):
                self._forget(e, now)
            else:
                first = min(first, e.expires_at)
        self._next_expiry = first

    def _set_descending(self, entry: PathEntry | None, now: float) -> None:
        prev = self.descending
        self.descending = entry
        descending_moved(self.host, prev, entry)

    def _drop(self, t: int, reason: str) -> None:
        count_drop(self.host.counters, t, reason)
