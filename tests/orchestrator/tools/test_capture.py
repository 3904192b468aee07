"""The Wireshark dissector (orchestrator/tools/capture/snek.lua) under the real tshark, against the project's codec.

Streams are built from the reference's byte-exact vectors and the legacy variant's frames, written as
pcapng (orchestrator/tools/capture/pcapng.py) with frames split across segments and several frames per segment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from node.core import wire
from node.core.payloads import (
    decode_announcement,
    decode_signed_root_payload,
    encode_legacy_bootstrap_payload,
    encode_legacy_path_payload,
)
from node.core.types import Frame, LegacyBootstrapPayload, LegacyPathPayload
from orchestrator.tools.capture import TSHARK_ARGS, check_capture, dissector_path, install_dissector
from orchestrator.tools.capture.pcapng import PcapngWriter, TcpFlow, write_streams
from tests.ci import REPO, SHARED, need

VECTORS_FILE = SHARED / "spec" / "pinecone-wire-vectors.json"


def _vectors() -> dict:
    """The reference's byte-exact vectors, read when a test needs them: a missing ../shared skips (fails in CI)
    that test, with the path, instead of failing the whole module at collection."""
    need(VECTORS_FILE.is_file(), f"the reference's wire vectors are not at {VECTORS_FILE} (set SNEKBED_SHARED)")
    return json.loads(VECTORS_FILE.read_text())
K1, K2, K3 = (bytes([i]) * 32 for i in (0x11, 0x22, 0x33))


def _tshark() -> str:
    path = shutil.which("tshark")
    need(path is not None, "tshark is not installed (apt-get install -y tshark; scripts/setup.sh does)")
    return str(path)


def _reference_frames() -> list[bytes]:
    return [bytes.fromhex(f["hex"]) for f in _vectors()["frames"]]


def _legacy_frames() -> list[bytes]:
    boot = encode_legacy_bootstrap_payload(LegacyBootstrapPayload(b"pathid01", K2, 7, b"\x01" * 64))
    path = encode_legacy_path_payload(LegacyPathPayload(b"pathid02", K3, 300, b"\x02" * 64, b"\x03" * 64))
    frames = [
        Frame(type=0xE0, destination_key=K1, source_coords=(1, 2), payload=boot),
        Frame(type=0xE1, destination_coords=(1,), source_coords=(2, 300), destination_key=K1, source_key=K2,
              payload=path),
        Frame(type=0xE2, destination_coords=(4, 5), destination_key=K1, source_key=K2, payload=path),
        Frame(type=0xE3, destination_key=K1, payload=b"pathid01"),
    ]
    return [wire.encode_frame(f) for f in frames]


def _streams() -> list[tuple[bytes, bytes]]:
    hs = bytes.fromhex(_vectors()["handshake"]["hex"])
    ref = _reference_frames()
    legacy_hs = hs[:4] + (0x8000003B).to_bytes(4, "big") + hs[8:]  # the legacy experiment's capabilities
    return [
        (hs + b"".join(ref), hs + b"".join(ref[::-1])),
        (legacy_hs + b"".join(_legacy_frames()), legacy_hs + b"".join(ref[:1] * 5)),
    ]


@pytest.mark.parametrize("mss", [40, 97, 4000], ids=["split-40", "split-97", "coalesced"])
def test_every_frame_type_decodes_alike_split_or_coalesced(tmp_path: Path, mss: int) -> None:
    _tshark()
    pcap = write_streams(tmp_path / "streams.pcapng", _streams(), mss=mss)
    result = check_capture(pcap)
    assert result.ok, result.to_dict()
    n_ref, n_legacy = len(_reference_frames()), len(_legacy_frames())
    assert result.handshakes == 4 and result.connections == 4
    assert result.frames == 2 * n_ref + n_legacy + 5
    assert {"legacy_bootstrap", "legacy_bootstrap_ack", "legacy_setup", "legacy_teardown", "traffic",
            "wakeup_broadcast", "bootstrap", "tree_announcement", "keepalive"} <= set(result.by_type)  # fmt: skip


def test_decoded_fields_match_the_reference_vectors(tmp_path: Path) -> None:
    tshark = _tshark()
    pcap = write_streams(tmp_path / "ref.pcapng", _streams()[:1], mss=1448)
    out = subprocess.run([tshark, "-r", str(pcap), "-X", f"lua_script:{dissector_path()}", *TSHARK_ARGS, "-Y", "snek",
                          "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,", "-e", "snek.type",
                          "-e", "snek.ann.hop.port", "-e", "snek.watermark.seq", "-e", "snek.bootstrap.seq",
                          "-e", "snek.ann.root_seq", "-e", "snek.hop_limit"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    dialler = out.splitlines()[0].split("\t")  # one segment: the dialler's handshake and every vector frame
    frames = [wire.decode_frame(raw) for raw in _reference_frames()]
    # the reference's numbering: 3 is Traffic, 4 is WakeupBroadcast
    assert dialler[0].split(",") == [f"0x{f.type:02x}" for f in frames]
    assert dialler[0].split(",") == ["0x00", "0x01", "0x02", "0x02", "0x03", "0x03", "0x03", "0x04"]
    ann = decode_announcement(frames[1].payload)
    assert dialler[1].split(",") == [str(h.port) for h in ann.hops] and dialler[4] == str(ann.root_seq)
    with_wm = [f for f in frames if f.type == 2 or (f.type == 3 and not f.destination_coords)]
    assert dialler[2].split(",") == [str(f.watermark.seq) for f in with_wm] and "42" in dialler[2].split(",")
    assert dialler[3].split(",") == [str(decode_signed_root_payload(f.payload).seq) for f in frames if f.type == 2]
    assert dialler[5].split(",") == [str(raw[7]) for raw in _reference_frames()]


def test_the_check_fails_on_a_dissector_with_types_3_and_4_swapped(tmp_path: Path) -> None:
    """The shipped reference dissector's bug: a check that cannot fail would not notice it."""
    _tshark()
    text = dissector_path().read_text()
    swapped = (text.replace('[3] = "Traffic", [4] = "WakeupBroadcast"', '[3] = "WakeupBroadcast", [4] = "Traffic"')
               .replace("elseif ftype == 3 then", "elseif ftype == 99 then")
               .replace("elseif ftype == 4 then", "elseif ftype == 3 then")
               .replace("elseif ftype == 99 then", "elseif ftype == 4 then"))  # fmt: skip
    assert swapped != text
    bad = tmp_path / "swapped.lua"
    bad.write_text(swapped)
    pcap = write_streams(tmp_path / "s.pcapng", _streams()[:1], mss=500)
    result = check_capture(pcap, dissector=bad)
    assert not result.ok and (result.malformed or result.mismatches)


def test_a_malformed_frame_is_expert_info_not_a_lua_error(tmp_path: Path) -> None:
    tshark = _tshark()
    hs = bytes.fromhex(_vectors()["handshake"]["hex"])
    keepalive = _reference_frames()[0]
    # a Traffic frame whose destination coordinates claim 200 bytes in a 20-byte body
    bad = b"pine\x00\x03\x00\x0a" + (30).to_bytes(2, "big") + b"\x00\x00" + b"\x00\xc8" + b"\x01" * 16
    pcap = write_streams(tmp_path / "bad.pcapng", [(hs + keepalive + bad + keepalive, hs)], mss=1448)
    args = [tshark, "-r", str(pcap), "-X", f"lua_script:{dissector_path()}", *TSHARK_ARGS]
    flagged = subprocess.run([*args, "-Y", "snek.malformed"], capture_output=True, text=True, check=True).stdout
    errors = subprocess.run([*args, "-Y", "_ws.lua.error"], capture_output=True, text=True, check=True).stdout
    assert flagged.strip() and not errors.strip()
    assert "Traffic [malformed]" in subprocess.run(args, capture_output=True, text=True, check=True).stdout
    result = check_capture(pcap)
    assert not result.ok and result.malformed >= 1 and any("codec refused" in m for m in result.mismatches)


def test_install_makes_plain_tshark_decode_without_options(tmp_path: Path) -> None:
    tshark = _tshark()
    home = tmp_path / "home"
    paths = install_dissector(home / ".local" / "lib" / "wireshark" / "plugins", home / ".config" / "wireshark")
    assert Path(paths["dissector"]).read_bytes() == dissector_path().read_bytes()
    assert "lbmsrs_tcp,0" in Path(paths["heuristic_protos"]).read_text().splitlines()
    pcap = write_streams(tmp_path / "p.pcapng", _streams()[:1], mss=1448)
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    out = subprocess.run([tshark, "-r", str(pcap), "-Y", "snek"], capture_output=True, text=True, env=env,
                         check=True).stdout  # fmt: skip
    assert out.count("SNEK") >= 4 and "Handshake caps=0x0000003b" in out
    again = install_dissector(home / ".local" / "lib" / "wireshark" / "plugins", home / ".config" / "wireshark")
    assert Path(again["heuristic_protos"]).read_text().count("lbmsrs_tcp") == 1  # idempotent


@pytest.mark.parametrize(("variant", "expect"), [("snek", {"bootstrap", "traffic", "tree_announcement"}),
                                                 ("legacy", {"legacy_bootstrap", "legacy_setup", "traffic"})])
def test_an_in_process_run_writes_a_capture_the_dissector_reads(tmp_path: Path, variant: str, expect: set) -> None:
    _tshark()
    pcap = tmp_path / f"{variant}.pcapng"
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sim", str(REPO / "compose" / "topologies" /
                           "mesh-12.yaml"), "--variant", variant, "--kill-root", "--pairs", "20", "--pcap", str(pcap),
                           "--json"], capture_output=True, text=True, cwd=REPO, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = check_capture(pcap)
    assert result.ok, result.to_dict()
    assert result.handshakes == 2 * 17 and expect <= set(result.by_type), result.to_dict()
    caps = subprocess.run([_tshark(), "-r", str(pcap), "-X", f"lua_script:{dissector_path()}", *TSHARK_ARGS, "-Y",
                           "snek.handshake.caps", "-T", "fields", "-e", "snek.handshake.caps"],
                          capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert set(caps) == {"0x8000003b" if variant == "legacy" else "0x0000003b"}


def test_a_capture_that_starts_mid_stream_lines_up_at_the_next_frame(tmp_path: Path) -> None:
    _tshark()
    frames = _reference_frames()
    stream = b"".join(frames)
    cut = len(frames[0]) + len(frames[1]) // 2  # the capture begins halfway through the tree announcement
    pcap = tmp_path / "mid.pcapng"
    with pcap.open("wb") as out:
        flow = TcpFlow(PcapngWriter(out), (bytes([10, 9, 0, 1]), 41000), (bytes([10, 9, 0, 2]), 7000), mss=60)
        flow.send(0.0, "a", stream[cut:])  # no SYN, no handshake: joined late
        flow.send(0.1, "b", frames[0] * 3)
    result = check_capture(pcap)
    assert result.ok, result.to_dict()
    assert result.handshakes == 0 and result.frames == len(frames) - 2 + 3
