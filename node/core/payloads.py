"""Payload codecs (PROTOCOL.md §3.2, §4.5-§4.7, §7.4, §8): root announcements, signed root payloads, the
handshake, pings, and the payloads of the older SNEK variant's messages.

Same contract as :mod:`node.core.wire`, which re-exports every public name here: decoders raise only
``ProtocolError`` subclasses on bad input, encoders raise ``ValueError`` for values they cannot encode.
"""

from __future__ import annotations

import struct
from typing import Final

from node.core import crypto
from node.core.codec import (
    CAPABILITIES,
    HANDSHAKE_LEN,
    HANDSHAKE_VERSION,
    PING,
    PING_LEN,
    PING_PREAMBLE,
    PONG,
    SIGHOP_MIN_LEN,
    TREE_TYPE,
    U16,
    Verify,
    check_key,
    encode_varu64,
    read_varu64,
)
from node.core.crypto import Identity
from node.core.errors import BadSignature, HandshakeRejected, MalformedFrame
from node.core.types import (
    KEY_LEN,
    LEGACY_PATH_ID_LEN,
    SIG_LEN,
    Announcement,
    Frame,
    FrameType,
    LegacyBootstrapPayload,
    LegacyFrameType,
    LegacyPathPayload,
    SigHop,
    SignedRootPayload,
)

__all__ = [
    "encode_announcement", "decode_announcement", "sign_announcement_for_port", "verify_announcement",
    "announcement_frame",
    "encode_signed_root_payload", "decode_signed_root_payload", "signed_root_protected_bytes",
    "make_signed_root_payload", "verify_signed_root_payload", "signed_root",
    "encode_handshake", "decode_handshake", "encode_ping", "decode_ping", "increment_ping_hops",
    "legacy_source_signed_bytes", "legacy_dest_signed_bytes",
    "encode_legacy_bootstrap_payload", "decode_legacy_bootstrap_payload",
    "encode_legacy_path_payload", "decode_legacy_path_payload",
    "encode_legacy_teardown_payload", "decode_legacy_teardown_payload",
]  # fmt: skip

_TREE: Final = TREE_TYPE
_LEGACY_BOOTSTRAP: Final = int(LegacyFrameType.LEGACY_BOOTSTRAP)
_LEGACY_ACK: Final = int(LegacyFrameType.LEGACY_BOOTSTRAP_ACK)
_LEGACY_SETUP: Final = int(LegacyFrameType.LEGACY_SETUP)
_LEGACY_TEARDOWN: Final = int(LegacyFrameType.LEGACY_TEARDOWN)
_HS_HEAD: Final = struct.Struct(">B3xI")
_PING: Final = struct.Struct(">8sBH32s32s")


# -------------------------------------------------------- root announcement (§4.5)
def encode_announcement(a: Announcement) -> bytes:
    """``RootKey ‖ varu64 RootSeq ‖ (varu64 Port ‖ Key ‖ Sig)*``. Raises ValueError on bad field sizes."""
    parts = [check_key(a.root_key, "root key"), encode_varu64(a.root_seq)]
    for idx, h in enumerate(a.hops):
        if len(h.signature) != SIG_LEN:
            raise ValueError(f"hop {idx} signature must be {SIG_LEN} bytes, got {len(h.signature)}")
        parts += (encode_varu64(h.port), check_key(h.key, f"hop {idx} key"), h.signature)
    return b"".join(parts)


def decode_announcement(payload: bytes | memoryview) -> Announcement:
    """Parse a root announcement (structure only; see :func:`verify_announcement`).

    Raises MalformedFrame ("bad_announcement", "non_minimal_varu64",
    "bad_varu64"); offsets are counted from the payload start.
    """
    buf = payload if type(payload) is bytes else bytes(payload)
    n = len(buf)
    if n < KEY_LEN + 1:
        raise MalformedFrame("bad_announcement", f"root announcement of {n} bytes, under 33", offset=n, frame_type=1)
    root_seq, i = read_varu64(buf, KEY_LEN, n, "root sequence", minimal=True, overrun="bad_announcement", t=_TREE)
    hops: list[SigHop] = []
    while n - i >= SIGHOP_MIN_LEN:
        k = len(hops)
        port, i = read_varu64(buf, i, n, f"hop {k} port", minimal=True, overrun="bad_announcement", t=_TREE)
        if n - i < KEY_LEN + SIG_LEN:
            detail = f"hop {k} needs 96 bytes of key and signature, {n - i} remain"
            raise MalformedFrame("bad_announcement", detail, offset=i, frame_type=_TREE)
        hops.append(SigHop(port, buf[i : i + KEY_LEN], buf[i + KEY_LEN : i + KEY_LEN + SIG_LEN]))
        i += KEY_LEN + SIG_LEN
    if i != n:
        detail = f"{n - i} leftover bytes after the last hop, fewer than the {SIGHOP_MIN_LEN} a hop needs"
        raise MalformedFrame("bad_announcement", detail, offset=i, frame_type=_TREE)
    return Announcement(buf[:KEY_LEN], root_seq, tuple(hops))


def sign_announcement_for_port(a: Announcement, identity: Identity, port: int) -> Announcement:
    """Append our hop for peer ``port``: sign the encoding of ``a`` (§4.5 "to send").

    The caller must not send an announcement that already holds its own key.
    Raises ValueError for an unencodable announcement or port.
    """
    sig = identity.sign(encode_announcement(a))
    encode_varu64(port)  # validates the port
    return Announcement(a.root_key, a.root_seq, (*a.hops, SigHop(port, identity.public_key, sig)))


def verify_announcement(a: Announcement, verify: Verify = crypto.verify) -> None:
    """Check every hop: ``Sig_i`` by ``Key_i`` over root ‖ hops before i.

    Raises BadSignature naming the first failing hop (0 = the root's hop).
    """
    prefix = bytearray(a.root_key)
    prefix += encode_varu64(a.root_seq)
    for idx, h in enumerate(a.hops):
        if not verify(h.key, bytes(prefix), h.signature):
            detail = f"root announcement hop {idx} (port {h.port}) signature by {h.key.hex()[:16]}… does not verify"
            raise BadSignature(detail, hop_index=idx, key=h.key)
        prefix += encode_varu64(h.port)
        prefix += h.key
        prefix += h.signature


def announcement_frame(a: Announcement) -> Frame:
    """A TreeAnnouncement frame (hop limit 0) carrying ``a``."""
    return Frame(FrameType.TREE_ANNOUNCEMENT, payload=encode_announcement(a))


# ------------------------------------------- bootstrap / broadcast payload (§4.6/4.7)
def signed_root_protected_bytes(seq: int, root_key: bytes, root_seq: int) -> bytes:
    """The signed bytes: ``varu64(seq) ‖ RootKey ‖ varu64(RootSeq)``. Raises ValueError on bad values."""
    return encode_varu64(seq) + check_key(root_key, "root key") + encode_varu64(root_seq)


def encode_signed_root_payload(p: SignedRootPayload) -> bytes:
    """Protected bytes then the 64-byte signature. Raises ValueError on bad field sizes."""
    if len(p.signature) != SIG_LEN:
        raise ValueError(f"signature must be {SIG_LEN} bytes, got {len(p.signature)}")
    return signed_root_protected_bytes(p.seq, p.root_key, p.root_seq) + p.signature


def decode_signed_root_payload(b: bytes | memoryview) -> SignedRootPayload:
    """Parse a bootstrap or wakeup broadcast payload; the length must match exactly.

    Raises MalformedFrame ("truncated", "trailing_bytes", "bad_varu64");
    offsets are counted from the payload start.
    """
    buf = b if type(b) is bytes else bytes(b)
    n = len(buf)
    seq, i = read_varu64(buf, 0, n, "payload sequence")
    if n - i < KEY_LEN:
        raise MalformedFrame("truncated", f"signed root payload has {n - i} of 32 root key bytes", offset=n)
    root_key = buf[i : i + KEY_LEN]
    root_seq, i = read_varu64(buf, i + KEY_LEN, n, "payload root sequence")
    if n - i < SIG_LEN:
        raise MalformedFrame("truncated", f"signed root payload has {n - i} of 64 signature bytes", offset=n)
    if n - i > SIG_LEN:
        raise MalformedFrame(
            "trailing_bytes", f"{n - i - SIG_LEN} bytes after the signed root payload", offset=i + SIG_LEN
        )
    return SignedRootPayload(seq, root_key, root_seq, buf[i:])


def make_signed_root_payload(identity: Identity, seq: int, root_key: bytes, root_seq: int) -> SignedRootPayload:
    """A payload signed by ``identity``. Raises ValueError on bad values."""
    signature = identity.sign(signed_root_protected_bytes(seq, root_key, root_seq))
    return SignedRootPayload(seq, root_key, root_seq, signature)


def verify_signed_root_payload(p: SignedRootPayload, key: bytes, verify: Verify = crypto.verify) -> bool:
    """True when ``key`` (bootstrap: header DestinationKey; broadcast: SourceKey) signed ``p``."""
    try:
        protected = signed_root_protected_bytes(p.seq, p.root_key, p.root_seq)
    except ValueError:
        return False
    return verify(key, protected, p.signature)


# ------------------------------------------- the older SNEK variant's payloads (§7.2, §7.4)
def _check_path_id(path_id: bytes) -> bytes:
    if len(path_id) != LEGACY_PATH_ID_LEN:
        raise ValueError(f"path ID must be {LEGACY_PATH_ID_LEN} bytes, got {len(path_id)}")
    return path_id


def _check_sig(sig: bytes, what: str) -> bytes:
    if len(sig) != SIG_LEN:
        raise ValueError(f"{what} must be {SIG_LEN} bytes, got {len(sig)}")
    return sig


def legacy_source_signed_bytes(path_key: bytes, path_id: bytes) -> bytes:
    """What the bootstrapper signs (§7.2 source sig): ``path key ‖ path ID`` (32 + 8 bytes).

    Raises ValueError for a key that is not 32 bytes or a path ID that is not 8.
    """
    return check_key(path_key, "path key") + _check_path_id(path_id)


def legacy_dest_signed_bytes(source_sig: bytes, path_key: bytes, path_id: bytes) -> bytes:
    """What the acker signs (§7.2 destination sig): ``source sig ‖ path key ‖ path ID`` (64 + 32 + 8 bytes).

    Raises ValueError on bad field sizes.
    """
    return _check_sig(source_sig, "source signature") + legacy_source_signed_bytes(path_key, path_id)


def encode_legacy_bootstrap_payload(p: LegacyBootstrapPayload) -> bytes:
    """``PathID:8 ‖ RootKey:32 ‖ RootSeq:varu64 ‖ SourceSig:64`` (§7.4, type 0xE0). Raises ValueError on bad sizes."""
    return b"".join((_check_path_id(p.path_id), check_key(p.root_key, "root key"), encode_varu64(p.root_seq),
                     _check_sig(p.source_sig, "source signature")))  # fmt: skip


def encode_legacy_path_payload(p: LegacyPathPayload) -> bytes:
    """``PathID:8 ‖ RootKey:32 ‖ RootSeq:varu64 ‖ SourceSig:64 ‖ DestSig:64`` (§7.4, types 0xE1 and 0xE2).

    Raises ValueError on bad field sizes.
    """
    return b"".join((_check_path_id(p.path_id), check_key(p.root_key, "root key"), encode_varu64(p.root_seq),
                     _check_sig(p.source_sig, "source signature"), _check_sig(p.dest_sig, "destination signature")))  # fmt: skip


def _decode_legacy(b: bytes | memoryview, sigs: int, t: int, what: str) -> tuple[bytes, bytes, int, list[bytes]]:
    buf = b if type(b) is bytes else bytes(b)
    n = len(buf)
    head = LEGACY_PATH_ID_LEN + KEY_LEN
    if n < head:
        raise MalformedFrame("truncated", f"{what} payload has {n} of its {head} path ID and root key bytes",
                             offset=n, frame_type=t)  # fmt: skip
    root_seq, i = read_varu64(buf, head, n, f"{what} root sequence", t=t)
    want = sigs * SIG_LEN
    if n - i < want:
        raise MalformedFrame("truncated", f"{what} payload has {n - i} of {want} signature bytes", offset=n, frame_type=t)
    if n - i > want:
        raise MalformedFrame("trailing_bytes", f"{n - i - want} bytes after the {what} payload", offset=i + want,
                             frame_type=t)  # fmt: skip
    out = [buf[i + k * SIG_LEN : i + (k + 1) * SIG_LEN] for k in range(sigs)]
    return buf[:LEGACY_PATH_ID_LEN], buf[LEGACY_PATH_ID_LEN:head], root_seq, out


def decode_legacy_bootstrap_payload(b: bytes | memoryview) -> LegacyBootstrapPayload:
    """Parse a LegacyBootstrap payload; the length must match exactly.

    Raises MalformedFrame ("truncated", "trailing_bytes", "bad_varu64"); offsets count from the payload start.
    """
    path_id, root_key, root_seq, (ssig,) = _decode_legacy(b, 1, _LEGACY_BOOTSTRAP, "legacy bootstrap")
    return LegacyBootstrapPayload(path_id, root_key, root_seq, ssig)


def decode_legacy_path_payload(b: bytes | memoryview, t: int = _LEGACY_SETUP) -> LegacyPathPayload:
    """Parse a LegacyBootstrapACK or LegacySetup payload (``t`` names which in errors); exact length.

    Raises MalformedFrame ("truncated", "trailing_bytes", "bad_varu64"); offsets count from the payload start.
    """
    what = "legacy bootstrap ACK" if t == _LEGACY_ACK else "legacy setup"
    path_id, root_key, root_seq, (ssig, dsig) = _decode_legacy(b, 2, t, what)
    return LegacyPathPayload(path_id, root_key, root_seq, ssig, dsig)


def encode_legacy_teardown_payload(path_id: bytes) -> bytes:
    """``PathID:8`` (§7.4, type 0xE3). Raises ValueError for a path ID that is not 8 bytes."""
    return _check_path_id(path_id)


def decode_legacy_teardown_payload(b: bytes | memoryview) -> bytes:
    """The path ID of a LegacyTeardown payload. Raises MalformedFrame ("truncated", "trailing_bytes")."""
    n = len(b)
    if n != LEGACY_PATH_ID_LEN:
        reason = "truncated" if n < LEGACY_PATH_ID_LEN else "trailing_bytes"
        raise MalformedFrame(reason, f"legacy teardown payload of {n} bytes is not an {LEGACY_PATH_ID_LEN}-byte path ID",
                             offset=min(n, LEGACY_PATH_ID_LEN), frame_type=_LEGACY_TEARDOWN)  # fmt: skip
    return bytes(b)


# ------------------------------------------------------------- handshake (§3.2)
def encode_handshake(identity: Identity, capabilities: int = CAPABILITIES) -> bytes:
    """Our 104-byte handshake. Raises ValueError if ``capabilities`` is not a u32."""
    if not 0 <= capabilities <= 0xFFFF_FFFF:
        raise ValueError(f"capabilities {capabilities} outside u32")
    head = _HS_HEAD.pack(HANDSHAKE_VERSION, capabilities) + identity.public_key
    return head + identity.sign(head)


def decode_handshake(
    data: bytes | memoryview, expected_capabilities: int = CAPABILITIES, *, verify: Verify = crypto.verify
) -> bytes:
    """Check a peer's handshake in spec order; return the peer's public key.

    Only the first 104 bytes are read; anything after them belongs to the
    frame stream. Raises HandshakeRejected with reason "truncated",
    "bad_version", "bad_capabilities" or "bad_signature".
    """
    if len(data) < HANDSHAKE_LEN:
        raise HandshakeRejected("truncated", f"got {len(data)} of {HANDSHAKE_LEN} bytes")
    hs = bytes(data[:HANDSHAKE_LEN])
    if hs[0] != HANDSHAKE_VERSION:
        raise HandshakeRejected("bad_version", f"version byte 0x{hs[0]:02x} is not 0x01 (at byte 0)")
    caps = int.from_bytes(hs[4:8], "big")
    if caps != expected_capabilities:
        detail = f"capabilities 0x{caps:08x} are not exactly 0x{expected_capabilities:08x} (at byte 4)"
        raise HandshakeRejected("bad_capabilities", detail)
    key = hs[8:40]
    if not verify(key, hs[:40], hs[40:]):
        raise HandshakeRejected("bad_signature", f"signature by {key.hex()[:16]}… does not verify (at byte 40)")
    return key


# ------------------------------------------------------------------ ping (§8)
def encode_ping(kind: int, hops: int, origin: bytes, destination: bytes) -> bytes:
    """The 75-byte ping payload. Raises ValueError for a bad kind, hops or key."""
    if kind not in (PING, PONG):
        raise ValueError(f"ping kind must be 0 (ping) or 1 (pong), got {kind}")
    if not 0 <= hops <= 0xFFFF:
        raise ValueError(f"ping hops {hops} outside u16")
    return _PING.pack(PING_PREAMBLE, kind, hops, check_key(origin, "ping origin"), check_key(destination, "ping destination"))


def decode_ping(payload: bytes | memoryview) -> tuple[int, int, bytes, bytes] | None:
    """(kind, hops, origin, destination), or None when ``payload`` is not a ping.

    Not a ping: shorter than 75 bytes, a wrong preamble, or a kind other than
    0/1. Bytes after the first 75 are ignored, as the reference does.
    """
    if len(payload) < PING_LEN or payload[:8] != PING_PREAMBLE:
        return None
    _, kind, hops, origin, destination = _PING.unpack_from(payload)
    if kind not in (PING, PONG):
        return None
    return kind, hops, origin, destination


def increment_ping_hops(payload: bytes) -> bytes:
    """For a Ping payload, a copy with ``hops`` + 1 (u16, wrapping); anything else unchanged."""
    if len(payload) < PING_LEN or payload[8] != PING or payload[:8] != PING_PREAMBLE:
        return payload
    out = bytearray(payload)
    U16.pack_into(out, 9, (U16.unpack_from(out, 9)[0] + 1) & 0xFFFF)
    return bytes(out)


# ------------------------------------------------- verified signed root payloads, memoised
_SIGNED_ROOT: Final[dict[tuple[bytes, bytes], SignedRootPayload]] = {}
_SIGNED_ROOT_MAX: Final = 100_000


def signed_root(payload: bytes, key: bytes) -> SignedRootPayload | None:
    """Parse a bootstrap/broadcast payload and verify it with ``key`` (§4.6, §4.7).

    Raises MalformedFrame when it does not parse; None when the signature is bad.
    Results are memoised on (key, payload): a bootstrap crosses many hops with
    the very same payload, and bytes objects cache their hash.
    """
    hit = _SIGNED_ROOT.get((key, payload))
    if hit is not None:
        return hit
    p = decode_signed_root_payload(payload)
    if not crypto.verify(key, signed_root_protected_bytes(p.seq, p.root_key, p.root_seq), p.signature):
        return None
    if len(_SIGNED_ROOT) >= _SIGNED_ROOT_MAX:
        _SIGNED_ROOT.clear()
    _SIGNED_ROOT[(key, payload)] = p
    return p
