"""Golden wire tests against the reference's real encoder (docs/interop.md, "Golden wire tests").

tests/interop/golden is a Go program of ours on the reference's public API (built offline in GOPATH mode by
``orchestrator.backends.reference.build_go_program``). It prints every frame type the reference can produce,
with varied field values, made two ways: with the reference's ``types`` package exactly as its router builds
each frame ("types"), and recorded from three real routers in a line ("router": their handshakes, tree
announcements, wakeup broadcasts, bootstraps and traffic of both routings). Each vector comes with the fields
the Go side put in (or that the reference's own decoders read back).

Here snekbed's codec (node/core/wire.py) decodes every vector, re-encodes it byte for byte and reads the same
fields; the streams go through the Wireshark dissector (orchestrator/tools/capture/snek.lua) under tshark.
Real Go build, real tshark, no mocks.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from node.core import wire
from node.core.crypto import Identity
from node.core.errors import MalformedFrame
from node.core.payloads import (
    decode_announcement,
    decode_handshake,
    decode_signed_root_payload,
    encode_handshake,
    verify_announcement,
    verify_signed_root_payload,
)
from node.core.types import FULL_MASK, Frame, Watermark
from orchestrator.backends.reference import build_go_program, reference_available
from orchestrator.tools.capture import TSHARK_ARGS, check_capture, dissector_path
from orchestrator.tools.capture.pcapng import write_streams
from tests.ci import REPO, need
from tests.interop.conftest import reference_out

pytestmark = pytest.mark.slow  # a first Go build takes a minute on two busy cores; later runs take seconds

GOLDEN_DIR = REPO / "tests" / "interop" / "golden"
TYPE_NAMES = {0: "keepalive", 1: "tree_announcement", 2: "bootstrap", 3: "traffic", 4: "wakeup_broadcast"}


@pytest.fixture(scope="module")
def golden(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    ok, why = reference_available()
    need(ok, f"the reference cannot be built here: {why}")
    # the reference node's cache directory: its Go build cache (the standard library compiled) is shared
    binary = build_go_program(GOLDEN_DIR, reference_out(request, tmp_path_factory))
    done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    vectors = [json.loads(line) for line in done.stdout.splitlines()]
    names = [v["name"] for v in vectors]
    assert len(names) == len(set(names)), "vector names must be unique"
    return vectors


def _of(vectors: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [v for v in vectors if v["kind"] == kind]


def _wm(d: dict[str, Any]) -> Watermark:
    return Watermark(bytes.fromhex(d["key"]), d["seq"])


def _field_mismatches(raw: bytes, fr: Frame, f: dict[str, Any]) -> list[str]:
    """What snekbed's decoding ``fr`` of ``raw`` says differently from the Go side's fields ``f``."""
    got: dict[str, Any] = {"type": int(fr.type), "version": raw[4], "extra": raw[6], "hop_limit": fr.hop_limit}
    want: dict[str, Any] = {k: f[k] for k in ("type", "version", "extra", "hop_limit")}
    t = f["type"]
    if t != 0:
        got["payload"], want["payload"] = fr.payload.hex(), f["payload"]
    if t == 2:
        got["destination_key"], want["destination_key"] = fr.destination_key.hex(), f["destination_key"]
        got["watermark"], want["watermark"] = fr.watermark, _wm(f["watermark"])
    elif t == 3:
        got["coords"] = (fr.destination_coords, fr.source_coords)
        want["coords"] = (tuple(f["destination_coords"]), tuple(f["source_coords"]))
        got["keys"] = (fr.destination_key.hex(), fr.source_key.hex())
        want["keys"] = (f["destination_key"], f["source_key"])
        # tree-routed traffic carries no watermark: both decoders then hold (FullMask, 0)
        got["watermark"] = fr.watermark
        want["watermark"] = _wm(f["watermark"]) if "watermark" in f else Watermark(FULL_MASK, 0)
    elif t == 4:
        got["source_key"], want["source_key"] = fr.source_key.hex(), f["source_key"]
    if t == 1:
        assert "announcement" in f, "the reference's SwitchAnnouncement.UnmarshalBinary refused it"
        a = decode_announcement(fr.payload)
        verify_announcement(a)  # every hop's signature, as snekbed checks them
        got["announcement"] = (a.root_key.hex(), a.root_seq, [(h.port, h.key.hex(), h.signature.hex()) for h in a.hops])
        g = f["announcement"]
        want["announcement"] = (g["root_key"], g["root_seq"],
                                [(h["port"], h["key"], h["signature"]) for h in g["hops"]])
    elif t in (2, 4):
        what = "bootstrap" if t == 2 else "broadcast"
        assert what in f, f"the reference's decoder refused the {what} payload"
        p = decode_signed_root_payload(fr.payload)
        got[what] = (p.seq, p.root_key.hex(), p.root_seq, p.signature.hex())
        g = f[what]
        want[what] = (g["seq"], g["root_key"], g["root_seq"], g["signature"])
        signer = fr.destination_key if t == 2 else fr.source_key  # §4.6 / §4.7
        if p.signature != bytes(64):  # an all-zero signature: a router with PINECONE_DISABLE_SIGNATURES
            assert verify_signed_root_payload(p, signer), f"{what} signature does not verify"
    return [f"{k}: snekbed {got[k]!r} != reference {want[k]!r}" for k in want if got[k] != want[k]]


def test_every_frame_type_is_covered(golden: list[dict[str, Any]]) -> None:
    frames = _of(golden, "frame")
    for source in ("types", "router"):
        types_seen = {v["fields"]["type"] for v in frames if v["source"] == source}
        want = set(TYPE_NAMES) if source == "types" else {1, 2, 3, 4}  # a live keepalive needs 3 s of silence
        assert want <= types_seen, (source, types_seen)
    routed = Counter(("tree" if v["fields"]["destination_coords"] else "snek", v["source"])
                     for v in frames if v["fields"]["type"] == 3)  # fmt: skip
    assert all(routed[(r, s)] for r in ("tree", "snek") for s in ("types", "router")), routed
    assert len(_of(golden, "handshake")) == 4 and len(_of(golden, "stream")) == 4
    assert all(v["go_roundtrip"] for v in frames), [v["name"] for v in frames if not v["go_roundtrip"]]
    assert any(len(v["hex"]) == 2 * 65535 for v in frames), "a frame of the largest size the length field allows"


def test_codec_decodes_reencodes_and_reads_the_same_fields(golden: list[dict[str, Any]]) -> None:
    problems: list[str] = []
    for v in _of(golden, "frame"):
        raw = bytes.fromhex(v["hex"])
        try:
            fr = wire.decode_frame(raw)
            again = wire.encode_frame(fr)
        except (MalformedFrame, ValueError) as exc:
            problems.append(f"{v['name']}: {exc!r}")
            continue
        if again != raw:
            n = min(len(raw), len(again))
            at = next((i for i in range(n) if raw[i] != again[i]), n)
            problems.append(f"{v['name']}: re-encoded differently from byte {at} "
                            f"(reference {raw[at:at + 16].hex()}, snekbed {again[at:at + 16].hex()})")
        problems += [f"{v['name']}: {m}" for m in _field_mismatches(raw, fr, v["fields"])]
    assert not problems, "\n".join(problems)


def test_handshakes_as_the_router_writes_them(golden: list[dict[str, Any]]) -> None:
    for v in _of(golden, "handshake"):
        raw = bytes.fromhex(v["hex"])
        key = decode_handshake(raw)
        assert key.hex() == v["fields"]["key"]
        # Ed25519 is deterministic: snekbed's handshake for the same key is the same 104 bytes
        assert encode_handshake(Identity(bytes.fromhex(v["fields"]["seed"]))) == raw, v["name"]
        assert raw[:8] == bytes.fromhex("010000000000003b")


def test_recorded_streams_split_into_the_same_frames(golden: list[dict[str, Any]]) -> None:
    by_name = {v["name"]: v for v in golden}
    for s in _of(golden, "stream"):
        direction = s["name"].removeprefix("stream/router/")
        raw = bytes.fromhex(s["hex"])
        assert raw[:104].hex() == by_name[f"handshake/router/{direction}"]["hex"]
        dec = wire.FrameDecoder()
        frames = []
        for i in range(104, len(raw), 61):  # fed in odd-sized chunks
            frames += dec.feed(raw[i : i + 61])
        assert dec.buffered == 0 and len(frames) == s["fields"]["frames"]
        want = [v for v in golden if v["name"].startswith(f"router/{direction}/")]
        assert [wire.encode_frame(f).hex() for f in frames] == [v["hex"] for v in want]


def test_what_no_decoder_can_take(golden: list[dict[str, Any]]) -> None:
    """A frame over 65 535 bytes: the reference writes it with its length field wrapped (PROTOCOL.md §4.3);
    snekbed's decoder refuses it and its encoder will not make it."""
    (v,) = _of(golden, "reject")
    raw = bytes.fromhex(v["hex"])
    f = v["fields"]
    assert len(raw) == f["total_len"] > 65535 and int.from_bytes(raw[8:10], "big") == f["total_len"] % 65536
    with pytest.raises(MalformedFrame):
        wire.decode_frame(raw)
    frame = Frame(3, f["hop_limit"], bytes.fromhex(f["destination_key"]), bytes.fromhex(f["source_key"]), (), (),
                  _wm(f["watermark"]), bytes(f["payload_len"]))
    with pytest.raises(ValueError, match="65535"):
        wire.encode_frame(frame)


def _streams(golden: list[dict[str, Any]]) -> list[tuple[bytes, bytes]]:
    """Every golden frame as TCP connections: the types vectors behind two router handshakes (each way, the
    other in reverse order), and the four recorded directions as the two links they were."""
    hs = {v["name"].removeprefix("handshake/router/"): bytes.fromhex(v["hex"]) for v in _of(golden, "handshake")}
    static = [bytes.fromhex(v["hex"]) for v in _of(golden, "frame") if v["source"] == "types"]
    rec = {v["name"].removeprefix("stream/router/"): bytes.fromhex(v["hex"]) for v in _of(golden, "stream")}
    return [
        (hs["root->middle"] + b"".join(static), hs["middle->root"] + b"".join(static[::-1])),
        (rec["root->middle"], rec["middle->root"]),
        (rec["middle->leaf"], rec["leaf->middle"]),
    ]


@pytest.mark.parametrize("mss", [97, 1448], ids=["split-97", "mss-1448"])
def test_dissector_reads_every_golden_frame(golden: list[dict[str, Any]], tmp_path: Path, mss: int) -> None:
    tshark = shutil.which("tshark")
    need(tshark is not None, "tshark is not installed (apt-get install -y tshark; scripts/setup.sh does)")
    pcap = write_streams(tmp_path / "golden.pcapng", _streams(golden), mss=mss)
    result = check_capture(pcap)
    frames = _of(golden, "frame")
    n_static = sum(v["source"] == "types" for v in frames)
    want = Counter(TYPE_NAMES[v["fields"]["type"]] for v in frames)
    want.update(TYPE_NAMES[v["fields"]["type"]] for v in frames if v["source"] == "types")  # sent both ways
    assert result.malformed == 0 and not result.mismatches, result.to_dict()
    assert result.ok and result.handshakes == 6 and result.connections == 6
    assert result.frames == 2 * n_static + sum(v["source"] == "router" for v in frames)
    assert Counter(result.by_type) == want
    # every frame's type decoded by the dissector itself, none unknown
    out = subprocess.run([str(tshark), "-r", str(pcap), "-X", f"lua_script:{dissector_path()}", *TSHARK_ARGS,
                          "-Y", "snek", "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,",
                          "-e", "snek.type", "-e", "snek.unknown_type"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    seen: Counter[str] = Counter()
    for line in out.splitlines():
        types_, unknown = (line.split("\t") + [""])[:2]
        assert not unknown.strip(), line
        seen.update(TYPE_NAMES[int(t, 16)] for t in types_.split(",") if t)
    assert seen == want
    # every port of every coordinate and announcement hop, exactly (varu64s up to 2**64 - 1)
    out = subprocess.run([str(tshark), "-r", str(pcap), "-X", f"lua_script:{dissector_path()}", *TSHARK_ARGS,
                          "-Y", "snek && tcp.stream == 0 && tcp.srcport == 40000", "-T", "fields", "-E", "occurrence=a",
                          "-E", "aggregator=,", "-e", "snek.ann.hop.port", "-e", "snek.coords.port"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    hop_ports, coord_ports = [], []
    for line in out.splitlines():
        hp, cp = (line.split("\t") + [""])[:2]
        hop_ports += [int(x) for x in hp.split(",") if x]
        coord_ports += [int(x) for x in cp.split(",") if x]
    static = [v["fields"] for v in frames if v["source"] == "types"]
    assert hop_ports == [h["port"] for f in static if f["type"] == 1 for h in f["announcement"]["hops"]]
    assert coord_ports == [p for f in static if f["type"] == 3 for p in f["destination_coords"] + f["source_coords"]]
    assert 2**64 - 1 in hop_ports and 2**64 - 1 in coord_ports
