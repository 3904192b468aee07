"""Signed payloads against the reference's byte vectors (pinecone-wire-vectors.json): root
announcements (PROTOCOL.md §4.5) and the signed root payloads of Bootstraps and wakeup
broadcasts (§4.6, §4.7)."""

from __future__ import annotations

from typing import Any

import pytest
from wirekit import pub

from node.core import wire
from node.core.crypto import Identity, verify
from node.core.errors import BadSignature, MalformedFrame
from node.core.types import Announcement, FrameType, SignedRootPayload


# ---------------------------------------------------------- announcements


def _build_announcement(vectors: dict[str, Any], keys: dict[str, Identity], hops: int) -> Announcement:
    v = vectors["switch_announcements"][hops]
    root = keys["k1"].public_key
    assert root.hex() == v["root_public_hex"]
    ann = Announcement(root, v["root_sequence"])
    for sig in v["signatures"] or []:
        ann = wire.sign_announcement_for_port(ann, keys[sig["signer"]], sig["hop_port"])
    return ann


@pytest.mark.parametrize("hops", [0, 1, 2, 3])
def test_switch_announcement_vectors(vectors: dict[str, Any], keys: dict[str, Identity], hops: int) -> None:
    v = vectors["switch_announcements"][hops]
    ann = _build_announcement(vectors, keys, hops)
    data = wire.encode_announcement(ann)
    assert data.hex() == v["hex"]
    assert len(data) == v["length"]
    assert ann.coords == tuple(v["coords"])
    for hop, sig in zip(ann.hops, v["signatures"] or [], strict=True):
        assert hop.signature.hex() == sig["signature_hex"]
        assert hop.key.hex() == sig["signer_pub_hex"]
    decoded = wire.decode_announcement(data)
    assert decoded == ann
    wire.verify_announcement(decoded)


def test_announcement_signature_coverage(vectors: dict[str, Any], keys: dict[str, Identity]) -> None:
    ann = _build_announcement(vectors, keys, 3)
    hops = list(ann.hops)

    def fails_at(a: Announcement) -> int:
        with pytest.raises(BadSignature) as exc:
            wire.verify_announcement(a)
        assert exc.value.reason == "bad_signature"
        return exc.value.hop_index

    assert fails_at(Announcement(ann.root_key, 6, ann.hops)) == 0  # root seq is covered by every hop
    # Hop 0's port is covered by hop 1's signature, not by its own.
    assert fails_at(Announcement(ann.root_key, 5, (type(hops[0])(2, hops[0].key, hops[0].signature), *hops[1:]))) == 1
    sig = bytearray(hops[1].signature)
    sig[0] ^= 1
    err_ann = Announcement(ann.root_key, 5, (hops[0], type(hops[1])(3, hops[1].key, bytes(sig)), hops[2]))
    with pytest.raises(BadSignature) as exc:
        wire.verify_announcement(err_ann)
    assert exc.value.hop_index == 1
    assert str(exc.value) == "root announcement hop 1 (port 3) signature by 8139770ea87d175f… does not verify"
    # The last hop's port is protected only by the handshake-key check (§4.5), not by a signature.
    wire.verify_announcement(
        Announcement(ann.root_key, 5, (*hops[:2], type(hops[2])(7, hops[2].key, hops[2].signature)))
    )


def test_announcement_frame_vector(vectors: dict[str, Any], keys: dict[str, Identity]) -> None:
    frame = wire.announcement_frame(_build_announcement(vectors, keys, 2))
    v = next(f for f in vectors["frames"] if f["name"] == "tree_announcement")
    assert wire.encode_frame(frame).hex() == v["hex"]


def test_decode_announcement_structure_errors(vectors: dict[str, Any]) -> None:
    one_hop = bytes.fromhex(vectors["switch_announcements"][1]["hex"])
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_announcement(one_hop + b"\x00" * 5)
    assert exc.value.reason == "bad_announcement"
    assert str(exc.value) == "5 leftover bytes after the last hop, fewer than the 97 a hop needs (at byte 130)"
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_announcement(one_hop[:20])
    assert exc.value.reason == "bad_announcement"
    # Non-minimal root sequence and port are rejected: they would change the signed bytes.
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_announcement(one_hop[:32] + b"\x80\x05" + one_hop[33:])
    assert (exc.value.reason, exc.value.offset) == ("non_minimal_varu64", 32)
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_announcement(one_hop[:33] + b"\x80\x01" + one_hop[34:])
    assert (exc.value.reason, exc.value.offset) == ("non_minimal_varu64", 33)
    # A two-byte port leaves 97 bytes but only 95 for key and signature.
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_announcement(one_hop[:33] + b"\x81\x80\x01" + one_hop[34:-2])
    assert exc.value.reason == "bad_announcement"


def test_live_capture_frames_decode_and_verify(vectors: dict[str, Any], keys: dict[str, Identity]) -> None:
    cap = vectors["live_capture"]
    for name, root_seq in (("first_frame", cap["first_frame_root_sequence"]), ("second_frame", 1)):
        data = bytes.fromhex(cap[f"{name}_hex"])
        frame = wire.decode_frame(data)
        assert frame.type == FrameType.TREE_ANNOUNCEMENT == cap[f"{name}_type"]
        ann = wire.decode_announcement(frame.payload)
        assert ann.root_key == pub(keys, "k1") and ann.root_seq == root_seq
        assert ann.coords == (1,) and ann.hops[0].key == pub(keys, "k1")
        wire.verify_announcement(ann)
        assert wire.encode_frame(frame) == data
        rebuilt = wire.sign_announcement_for_port(Announcement(ann.root_key, root_seq), keys["k1"], 1)
        assert wire.encode_frame(wire.announcement_frame(rebuilt)) == data


# ------------------------------------------------- signed root payloads (§4.6, §4.7)


@pytest.mark.parametrize("name", ["bootstrap_payload", "wakeup_broadcast_payload"])
def test_signed_root_payload_vectors(vectors: dict[str, Any], keys: dict[str, Identity], name: str) -> None:
    v = vectors[name]
    root_key = bytes.fromhex(v["root_public_hex"])
    seq = int(v["sequence"])
    assert wire.signed_root_protected_bytes(seq, root_key, v["root_sequence"]).hex() == v["protected_payload_hex"]
    p = wire.make_signed_root_payload(keys["k4"], seq, root_key, v["root_sequence"])
    assert p.signature.hex() == v["signature_hex"]
    data = wire.encode_signed_root_payload(p)
    assert data.hex() == v["hex"]
    assert wire.decode_signed_root_payload(data) == p
    assert wire.verify_signed_root_payload(p, pub(keys, "k4"))
    assert not wire.verify_signed_root_payload(p, pub(keys, "k5"))
    assert not wire.verify_signed_root_payload(
        SignedRootPayload(seq + 1, root_key, v["root_sequence"], p.signature), pub(keys, "k4")
    )
    # The verifier key comes from the frame header (DestinationKey / SourceKey), §4.6/§4.7.
    frame = wire.decode_frame(
        bytes.fromhex(next(f["hex"] for f in vectors["frames"] if f["inputs"].get("payload") == f"{name}.hex"))
    )
    header_key = frame.destination_key if frame.type == FrameType.BOOTSTRAP else frame.source_key
    assert wire.verify_signed_root_payload(wire.decode_signed_root_payload(frame.payload), header_key, verify)


def test_signed_root_payload_exact_length(vectors: dict[str, Any]) -> None:
    data = bytes.fromhex(vectors["bootstrap_payload"]["hex"])
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_signed_root_payload(data + b"\x00")
    assert (exc.value.reason, str(exc.value)) == (
        "trailing_bytes",
        "1 bytes after the signed root payload (at byte 103)",
    )
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_signed_root_payload(data[:-1])
    assert (exc.value.reason, str(exc.value)) == (
        "truncated",
        "signed root payload has 63 of 64 signature bytes (at byte 102)",
    )
