"""Protocol data types shared by the codec and the router (PROTOCOL.md §4).

Everything here is plain data: frozen, slotted dataclasses with no behaviour
beyond cheap helpers. The codec (`wire.py`) turns them into bytes and back;
the router (`router.py`) makes decisions on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final, NamedTuple

__all__ = [
    "FrameType",
    "LegacyFrameType",
    "LinkType",
    "Frame",
    "Root",
    "Watermark",
    "SigHop",
    "Announcement",
    "SignedRootPayload",
    "LegacyBootstrapPayload",
    "LegacyPathPayload",
    "LEGACY_PATH_ID_LEN",
    "FULL_MASK",
    "INITIAL_WATERMARK",
    "KEY_LEN",
    "SIG_LEN",
    "HEADER_LEN",
    "MAX_FRAME_LEN",
    "MAX_HOP_LIMIT",
    "BROADCAST_HOP_LIMIT",
    "LOCAL_PORT",
    "with_hop_limit",
    "with_watermark",
    "with_payload",
    "without_destination_coords",
]

KEY_LEN: Final = 32
SIG_LEN: Final = 64
HEADER_LEN: Final = 10
MAX_FRAME_LEN: Final = 65_535
MAX_HOP_LIMIT: Final = 10  # initial hop limit of traffic (§4.9)
BROADCAST_HOP_LIMIT: Final = 5  # NetworkHorizonDistance (§4.9, §6.8)
LOCAL_PORT: Final = 0  # port 0 is the local router (the application)
LEGACY_PATH_ID_LEN: Final = 8  # §7.4: path IDs of the older SNEK variant

FULL_MASK: Final = b"\xff" * KEY_LEN


class FrameType(IntEnum):
    KEEPALIVE = 0
    TREE_ANNOUNCEMENT = 1
    BOOTSTRAP = 2
    TRAFFIC = 3
    WAKEUP_BROADCAST = 4


class LegacyFrameType(IntEnum):
    """The older SNEK variant's messages (§7.4, experimental): a block of their own, disjoint from
    :class:`FrameType`, which a reference node drops as unknown (§4.3)."""

    LEGACY_BOOTSTRAP = 0xE0
    LEGACY_BOOTSTRAP_ACK = 0xE1
    LEGACY_SETUP = 0xE2
    LEGACY_TEARDOWN = 0xE3


class LinkType(IntEnum):
    """Local configuration only, never on the wire (§3.4). Lower is preferred."""

    PIPE = 0
    MULTICAST = 1
    BONJOUR = 2
    REMOTE = 3
    BLUETOOTH = 4


class Root(NamedTuple):
    """A root: key and sequence. Two roots are equal only if both are (§4.2).

    A NamedTuple rather than a dataclass: routers build and compare these on
    every forwarded frame, and tuple construction is several times cheaper.
    """

    key: bytes
    seq: int


class Watermark(NamedTuple):
    key: bytes
    seq: int

    def worse_than(self, other: Watermark) -> bool:
        """§4.8: a higher key, or the same key with a lower non-zero sequence."""
        if self.key != other.key:
            return self.key > other.key
        return self.seq != 0 and self.seq < other.seq


INITIAL_WATERMARK: Final = Watermark(FULL_MASK, 0)


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of any type (§4.3, §4.4).

    Fields that a type does not carry keep their defaults:
      * Keepalive: nothing.
      * TreeAnnouncement: ``payload`` = encoded root announcement (§4.5).
      * Bootstrap: ``destination_key`` (the bootstrapping node), ``watermark``,
        ``payload`` = encoded bootstrap payload (§4.6).
      * Traffic: ``destination_coords``, ``source_coords``, ``destination_key``,
        ``source_key``, ``watermark`` (on the wire only when the destination
        coordinates are empty), ``payload``.
      * WakeupBroadcast: ``source_key``, ``payload`` (§4.7).
      * LegacyBootstrap (§7.4): ``destination_key`` (the path key: the bootstrapping node),
        ``source_coords``, ``payload`` = :class:`LegacyBootstrapPayload`.
      * LegacyBootstrapACK: ``destination_coords``, ``source_coords``, ``destination_key`` (the path key),
        ``source_key`` (the acker), ``payload`` = :class:`LegacyPathPayload`.
      * LegacySetup: ``destination_coords``, ``destination_key`` (the acker), ``source_key`` (the
        bootstrapper), ``payload`` = :class:`LegacyPathPayload`.
      * LegacyTeardown: ``destination_key`` (the path key), ``payload`` = the 8-byte path ID.
      * Unknown types: ``payload`` = the raw body after the header.
    """

    type: FrameType | LegacyFrameType | int  # the enum member for a known type (decode_frame), else the number
    hop_limit: int = 0
    destination_key: bytes = b""
    source_key: bytes = b""
    destination_coords: tuple[int, ...] = ()
    source_coords: tuple[int, ...] = ()
    watermark: Watermark = INITIAL_WATERMARK
    payload: bytes = b""

    def __init__(
        self,
        type: FrameType | LegacyFrameType | int,
        hop_limit: int = 0,
        destination_key: bytes = b"",
        source_key: bytes = b"",
        destination_coords: tuple[int, ...] = (),
        source_coords: tuple[int, ...] = (),
        watermark: Watermark = INITIAL_WATERMARK,
        payload: bytes = b"",
    ) -> None:
        # The dataclass __init__, written out (dataclasses keeps a class's own; the fields' defaults above must
        # match, tests/node/core/test_compiled_core.py checks it): mypyc compiles this one and turns each
        # object.__setattr__ into a plain store, where the generated one would run interpreted. Interpreted,
        # it is still no slower than the generated one.
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "hop_limit", hop_limit)
        object.__setattr__(self, "destination_key", destination_key)
        object.__setattr__(self, "source_key", source_key)
        object.__setattr__(self, "destination_coords", destination_coords)
        object.__setattr__(self, "source_coords", source_coords)
        object.__setattr__(self, "watermark", watermark)
        object.__setattr__(self, "payload", payload)


# Per-frame copies, written out: dataclasses.replace runs interpreted (5.8 % of a 1 000-node run through the
# wakeup-broadcast burst, most of it the flood's one copy per admitted broadcast).
def with_watermark(f: Frame, wm: Watermark) -> Frame:
    """``dataclasses.replace(f, watermark=wm)``."""
    return Frame(f.type, f.hop_limit, f.destination_key, f.source_key, f.destination_coords, f.source_coords, wm,
                 f.payload)


def with_hop_limit(f: Frame, hop_limit: int) -> Frame:
    """``dataclasses.replace(f, hop_limit=hop_limit)``."""
    return Frame(f.type, hop_limit, f.destination_key, f.source_key, f.destination_coords, f.source_coords,
                 f.watermark, f.payload)


def with_payload(f: Frame, payload: bytes) -> Frame:
    """``dataclasses.replace(f, payload=payload)``."""
    return Frame(f.type, f.hop_limit, f.destination_key, f.source_key, f.destination_coords, f.source_coords,
                 f.watermark, payload)


def without_destination_coords(f: Frame) -> Frame:
    """``dataclasses.replace(f, destination_coords=())``."""
    return Frame(f.type, f.hop_limit, f.destination_key, f.source_key, (), f.source_coords, f.watermark, f.payload)


@dataclass(frozen=True, slots=True)
class SigHop:
    """One signature-with-hop entry of a root announcement (§4.2, §4.5)."""

    port: int
    key: bytes
    signature: bytes


@dataclass(frozen=True, slots=True)
class Announcement:
    """A root announcement (§4.5): the root, then one signed hop per node."""

    root_key: bytes
    root_seq: int
    hops: tuple[SigHop, ...] = ()

    @property
    def root(self) -> Root:
        return Root(self.root_key, self.root_seq)

    @property
    def coords(self) -> tuple[int, ...]:
        return tuple(h.port for h in self.hops)


@dataclass(frozen=True, slots=True)
class SignedRootPayload:
    """Bootstrap (§4.6) and wakeup broadcast (§4.7) payload: seq, root, signature."""

    seq: int
    root_key: bytes
    root_seq: int
    signature: bytes = field(default=b"\x00" * SIG_LEN)


@dataclass(frozen=True, slots=True)
class LegacyBootstrapPayload:
    """The payload of a LegacyBootstrap (§7.4): path ID, the sender's root, the source signature (§7.2)."""

    path_id: bytes
    root_key: bytes
    root_seq: int
    source_sig: bytes = field(default=b"\x00" * SIG_LEN)

    @property
    def root(self) -> Root:
        return Root(self.root_key, self.root_seq)


@dataclass(frozen=True, slots=True)
class LegacyPathPayload:
    """The payload of a LegacyBootstrapACK and of a LegacySetup (§7.4): path ID, root, both signatures."""

    path_id: bytes
    root_key: bytes
    root_seq: int
    source_sig: bytes = field(default=b"\x00" * SIG_LEN)
    dest_sig: bytes = field(default=b"\x00" * SIG_LEN)

    @property
    def root(self) -> Root:
        return Root(self.root_key, self.root_seq)
