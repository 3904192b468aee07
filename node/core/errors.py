"""Typed protocol errors raised by the sans-IO core (PROTOCOL.md §3.2, §4).

One family: every error the core raises because a *peer* broke the protocol
is a :class:`ProtocolError`. The shell catches ``ProtocolError`` per peer and
closes that peer only. Caller bugs (our own code passing bad values) are
``ValueError``/``TypeError`` instead and are never part of this family.

Every ``ProtocolError`` has a ``reason``: a short slug from a small, fixed
set, safe to use as a Prometheus label value. ``str(error)`` says what went
wrong and where, e.g. ``frame length 7 below header size 10 (at byte 8)``.
"""

from __future__ import annotations

__all__ = [
    "ProtocolError",
    "MalformedFrame",
    "HandshakeRejected",
    "BadSignature",
    "MALFORMED_REASONS",
    "HANDSHAKE_REASONS",
]

#: Every ``MalformedFrame.reason`` the codec can produce (a bounded label set).
MALFORMED_REASONS: frozenset[str] = frozenset(
    {
        "bad_magic",  # header does not start with b"pine"
        "short_length",  # header length field below the 10-byte header
        "truncated",  # the data ends before a field does
        "trailing_bytes",  # bytes left over after the last field
        "bad_varu64",  # varu64 longer than 10 bytes or >= 2**64
        "non_minimal_varu64",  # varu64 with a leading 0x80 where minimal is required
        "bad_coords",  # coordinates length field / port list inconsistent
        "bad_announcement",  # root announcement structure broken (§4.5)
        "bad_payload_length",  # plen disagrees with the bytes actually present
        "oversize",  # a length that cannot fit a 65 535-byte frame
    }
)

#: Every ``HandshakeRejected.reason`` (§3.2 checks, in spec order, plus truncation).
HANDSHAKE_REASONS: frozenset[str] = frozenset({"bad_version", "bad_capabilities", "bad_signature", "truncated"})


class ProtocolError(Exception):
    """Base: the peer (or the bytes we were handed) broke the overlay protocol.

    ``reason`` is a bounded slug for metrics; ``detail`` is the human text.
    """

    reason: str
    detail: str

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class MalformedFrame(ProtocolError):
    """A frame, or a payload inside one, does not parse (§4.3 "disconnect").

    ``offset`` is the byte position of the problem, counted from the start of
    the buffer handed to the decoder (the frame for ``decode_frame`` and
    ``FrameDecoder``, the payload for the payload decoders). ``frame_type`` is
    the header's type byte when known.

    Raises AssertionError (a codec bug) when ``reason`` is not one of
    :data:`MALFORMED_REASONS`.
    """

    offset: int
    frame_type: int | None

    def __init__(self, reason: str, detail: str, *, offset: int, frame_type: int | None = None) -> None:
        assert reason in MALFORMED_REASONS, f"unknown MalformedFrame reason {reason!r}"
        super().__init__(reason, detail)
        self.offset = offset
        self.frame_type = frame_type

    def __str__(self) -> str:
        return f"{self.detail} (at byte {self.offset})"

    def __reduce__(self) -> tuple[object, ...]:  # keep pickling (e.g. across processes) working
        return (_rebuild_malformed, (self.reason, self.detail, self.offset, self.frame_type))


def _rebuild_malformed(reason: str, detail: str, offset: int, frame_type: int | None) -> MalformedFrame:
    return MalformedFrame(reason, detail, offset=offset, frame_type=frame_type)


class HandshakeRejected(ProtocolError):
    """The peer's 104-byte handshake failed a §3.2 check; close silently.

    ``reason`` is one of :data:`HANDSHAKE_REASONS`. Raises AssertionError (a
    codec bug) for any other reason.
    """

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in HANDSHAKE_REASONS, f"unknown HandshakeRejected reason {reason!r}"
        super().__init__(reason, detail)

    def __str__(self) -> str:
        return f"handshake rejected: {self.detail}"

    def __reduce__(self) -> tuple[object, ...]:
        return (HandshakeRejected, (self.reason, self.detail))


class BadSignature(ProtocolError):
    """A signature in a root announcement does not verify (§4.5 "disconnect").

    ``hop_index`` is the 0-based index of the failing hop in the announcement
    (hop 0 was added by the root); ``key`` is that hop's signing key.
    """

    hop_index: int
    key: bytes

    def __init__(self, detail: str, *, hop_index: int, key: bytes = b"") -> None:
        super().__init__("bad_signature", detail)
        self.hop_index = hop_index
        self.key = key

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_bad_signature, (self.detail, self.hop_index, self.key))


def _rebuild_bad_signature(detail: str, hop_index: int, key: bytes) -> BadSignature:
    return BadSignature(detail, hop_index=hop_index, key=key)
