"""Received root announcements: decoded, signature-checked and sanity-checked once (§4.5, §5.3).

An announcement from a peer is the announcement that peer stored (from its own
parent) plus one hop. :class:`AnnouncementCache` remembers announcements that
verified in full, so a repeat costs one hop: parse it, check its signature.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from . import wire
from .crypto import verify_uncached
from .errors import BadSignature
from .types import Announcement, Root, SigHop

__all__ = ["ParsedAnnouncement", "AnnouncementCache", "ANNOUNCEMENTS"]


@dataclass(frozen=True, slots=True)
class ParsedAnnouncement:
    """A decoded, signature-checked announcement with what the router derives from it."""

    ann: Announcement
    raw: bytes
    root: Root
    hop_keys: tuple[bytes, ...]
    ports: tuple[int, ...]
    keyset: frozenset[bytes]
    problem: str | None  # the first failed intrinsic sanity check of §5.3 step 2, if any

    @classmethod
    def full(cls, ann: Announcement, raw: bytes) -> ParsedAnnouncement:
        hops = ann.hops
        keys = tuple(h.key for h in hops)
        ports = tuple(h.port for h in hops)
        keyset = frozenset(keys)
        problem = None
        if not hops:
            problem = "announcement_no_hops"
        elif keys[0] != ann.root_key:
            problem = "announcement_first_hop_not_root"
        elif 0 in ports:
            problem = "announcement_port_zero"
        elif len(keyset) != len(keys):
            problem = "announcement_duplicate_key"
        return cls(ann, raw, Root(ann.root_key, ann.root_seq), keys, ports, keyset, problem)

    def extend(self, hop: SigHop, raw: bytes) -> ParsedAnnouncement:
        """This announcement plus one hop (the sender's), as a full decode would give."""
        problem = self.problem
        if problem is None:
            if hop.port == 0:
                problem = "announcement_port_zero"
            elif hop.key in self.keyset:
                problem = "announcement_duplicate_key"
        ann = Announcement(self.ann.root_key, self.ann.root_seq, (*self.ann.hops, hop))
        return ParsedAnnouncement(
            ann, raw, self.root, (*self.hop_keys, hop.key), (*self.ports, hop.port), self.keyset | {hop.key}, problem
        )


class AnnouncementCache:
    """Decoded and fully verified announcements, keyed by a digest of their bytes.

    An announcement from a peer is the announcement that peer stored (from its
    own parent) plus one hop. When that prefix has already been decoded and
    verified, here or by another node of the in-process network, only the last
    hop is parsed and checked. Sequential parsing is deterministic, so the
    result is exactly what a full decode would give. Bounded (LRU).
    """

    def __init__(self, capacity: int = 20_000) -> None:
        self.capacity = capacity
        self._anns: OrderedDict[bytes, ParsedAnnouncement] = OrderedDict()
        self._sigs_ok: set[tuple[bytes, bytes, bytes]] = set()
        self.hits = 0
        self.misses = 0

    def parse(self, payload: bytes) -> ParsedAnnouncement:
        """Decode and verify (§4.5). Raises MalformedFrame or BadSignature."""
        n = len(payload)
        for tail in (97, 98):  # the last hop: varu64(port <= 253) is 1 or 2 bytes, then key and signature
            cut = n - tail
            if cut < 33:
                break
            prefix = payload[:cut]
            pdigest = _digest(prefix)
            base = self._anns.get(pdigest)
            if base is None:
                continue
            port, i = wire.decode_varu64(payload, cut, minimal=True)
            if n - i != 96:
                continue
            key, sig = payload[i : i + 32], payload[i + 32 :]
            # Every peer of the sender gets the same (key, prefix, signature): check it once.
            seen = (key, pdigest, sig)
            if seen not in self._sigs_ok:
                if not verify_uncached(key, prefix, sig):
                    index = len(base.hop_keys)
                    raise BadSignature(f"hop {index} signature does not verify", hop_index=index, key=key)
                if len(self._sigs_ok) >= self.capacity:
                    self._sigs_ok.clear()
                self._sigs_ok.add(seen)
            self.hits += 1
            return self._remember(base.extend(SigHop(port, key, sig), payload))
        ann = wire.decode_announcement(payload)
        wire.verify_announcement(ann)
        self.misses += 1
        return self._remember(ParsedAnnouncement.full(ann, bytes(payload)))

    def _remember(self, parsed: ParsedAnnouncement) -> ParsedAnnouncement:
        self._anns[_digest(parsed.raw)] = parsed
        if len(self._anns) > self.capacity:
            self._anns.popitem(last=False)
        return parsed


ANNOUNCEMENTS: Final = AnnouncementCache()


def _digest(b: bytes) -> bytes:
    return hashlib.blake2b(b, digest_size=16).digest()
