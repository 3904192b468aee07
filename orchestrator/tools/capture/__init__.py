"""Packet captures of snek peerings, and the Wireshark dissector that reads them (docs/capture.md).

* :func:`install_dissector`: ``snekbed wireshark install`` puts ``snek.lua`` (shipped in this package)
  in Wireshark's personal plugin folder and turns off the LBMSRS heuristic, which Wireshark 4.0 runs
  first and which claims a snek handshake segment.
* :func:`capture_node` (:func:`capture_in_run` for a run directory): ``snekbed capture``, one node (or one of its links) of a running Docker run,
  recorded to pcapng from the host inside the container's network namespace (``nsenter`` + the host's
  ``dumpcap``; nothing is installed in the node image).
* :func:`check_capture`: ``snekbed capture check FILE``, decodes every snek connection in a capture
  twice, with tshark and the dissector and with the project's own codec (node/core/wire.py) from the
  reassembled TCP bytes, and compares them frame by frame.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from contract.frames import frame_type_name
from node.core import wire
from node.core.codec import HANDSHAKE_LEN
from node.core.errors import MalformedFrame
from node.core.payloads import decode_announcement, decode_legacy_path_payload, decode_signed_root_payload
from node.core.types import Frame, FrameType, LegacyFrameType
from node.core.variants import VARIANTS

from orchestrator.backends.docker_links import link_endpoints
from orchestrator.model.runs import RunDir

# frame types by name (node.core.types), and the header's fields by offset (§4.1: magic, version, type, extra,
# hop limit, length)
_TREE, _BOOT, _TRAFFIC, _WAKEUP = (FrameType.TREE_ANNOUNCEMENT, FrameType.BOOTSTRAP, FrameType.TRAFFIC,
                                   FrameType.WAKEUP_BROADCAST)
_LEGACY_PATHS = (LegacyFrameType.LEGACY_BOOTSTRAP_ACK, LegacyFrameType.LEGACY_SETUP)
_VERSION_AT, _HOP_LIMIT_AT, _LENGTH_AT = 4, 7, 8
_PING_TYPE_AT = len(wire.PING_PREAMBLE)
_HANDSHAKE_HEAD = wire.HANDSHAKE_VERSION.to_bytes(1, "big") + bytes(3)  # the version byte, three zero bytes
_KNOWN_CAPABILITIES = frozenset(v.capabilities for v in VARIANTS.values())  # the ping payload (§8): preamble, type, u16 hop count

__all__ = ["CaptureCheck", "CaptureError", "CaptureRefused", "DISSECTOR", "TSHARK_ARGS", "capture_in_run",
           "capture_node", "check_capture", "dissector_path", "install_dissector"]

DISSECTOR = "snek.lua"
#: what tshark needs to use the shipped dissector without installing it
HEURISTIC_OFF = "lbmsrs_tcp"  # Wireshark 4.0's LBMSRS heuristic claims a 104-byte handshake segment first
TSHARK_ARGS: tuple[str, ...] = ("--disable-heuristic", HEURISTIC_OFF)


class CaptureError(Exception):
    """A capture could not be made or read (a missing tool, no such node, tshark failing)."""


class CaptureRefused(CaptureError):
    """A capture that cannot be made at all, so nothing was recorded: a missing tool, no such node or link, a run
    that is not a Docker run."""


def dissector_path() -> Path:
    return Path(str(resources.files("orchestrator.tools.capture") / DISSECTOR))


def install_dissector(plugins_dir: Path | None = None, config_dir: Path | None = None) -> dict[str, str]:
    """Copy the dissector into Wireshark's personal plugins and disable the LBMSRS heuristic there.

    Defaults: ``~/.local/lib/wireshark/plugins`` and ``~/.config/wireshark`` (Wireshark's personal
    folders on Linux). Other lines of ``heuristic_protos`` are kept. Returns the paths written.
    """
    home = Path.home()
    plugins = plugins_dir or home / ".local" / "lib" / "wireshark" / "plugins"
    config = config_dir or Path(os.environ.get("XDG_CONFIG_HOME", home / ".config")) / "wireshark"
    plugins.mkdir(parents=True, exist_ok=True)
    config.mkdir(parents=True, exist_ok=True)
    target = plugins / DISSECTOR
    shutil.copyfile(dissector_path(), target)
    heur = config / "heuristic_protos"
    lines = [ln for ln in (heur.read_text().splitlines() if heur.exists() else [])
             if ln.split(",")[0].strip() != HEURISTIC_OFF]  # fmt: skip
    heur.write_text("\n".join([*lines, f"{HEURISTIC_OFF},0"]) + "\n")
    return {"dissector": str(target), "heuristic_protos": str(heur)}


# ---------------------------------------------------------------- capturing a Docker node


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise CaptureRefused(f"{tool} is not installed (apt-get install -y tshark: it brings dumpcap)")
    return path


def capture_node(run_id: str, node: str, out: Path, duration_s: float, *, peer: str | None = None,
                 client: Any = None) -> Path:
    """Record ``node``'s snek traffic (only its link to ``peer`` when given) for ``duration_s`` into ``out``.

    Runs the host's dumpcap inside the container's network namespace. Raises CaptureError.
    """
    dumpcap, nsenter = _need("dumpcap"), _need("nsenter")
    ends = [e for e in link_endpoints(run_id, client, with_dev=True) if e.node == node]
    if not ends:
        raise CaptureRefused(f"run {run_id}: no running container for node {node!r} with links")
    if peer is not None:
        ends = [e for e in ends if e.peer == peer]
        if not ends:
            raise CaptureRefused(f"run {run_id}: node {node!r} has no link to {peer!r}")
        iface, bpf = ends[0].dev, f"tcp and host {ends[0].peer_ip}"
    else:
        iface, bpf = "any", "tcp and (" + " or ".join(f"host {e.peer_ip}" for e in ends) + ")"
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = [nsenter, "-t", str(ends[0].pid), "-n", dumpcap, "-q", "-i", iface, "-f", bpf, "-a",
            f"duration:{max(1, round(duration_s))}", "-w", str(out)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=duration_s + 60)
    if done.returncode != 0 or not out.exists():
        raise CaptureError(f"dumpcap in {node}'s namespace failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    os.chmod(out, 0o644)
    return out


def capture_in_run(run: RunDir, node: str, duration_s: float, *, peer: str | None = None,
                   out: Path | None = None) -> Path:
    """:func:`capture_node` for a run directory: only a Docker run can be captured from the host; the file goes
    to ``out``, by default ``runs/<id>/captures/<node>[-<peer>].pcapng``. Returns it. Raises CaptureError."""
    if run.meta().get("backend") != "docker":
        raise CaptureRefused(f"run {run.run_id} is not a Docker run (an in-process run writes pcapng with "
                           "`snekbed sim --pcap FILE`)")
    out = out or run.path / "captures" / (f"{node}-{peer}.pcapng" if peer else f"{node}.pcapng")
    return capture_node(run.run_id, node, out, duration_s, peer=peer)


# ---------------------------------------------------------------- checking a capture


@dataclass
class CaptureCheck:
    """What a capture holds, as tshark + the dissector and as the project's codec read it."""

    connections: int = 0  # directions of TCP streams that carried snek bytes
    handshakes: int = 0
    frames: int = 0  # frames the project's codec decoded
    by_type: dict[str, int] = field(default_factory=dict)
    malformed: int = 0  # packets tshark flagged (snek.malformed, _ws.malformed) or Lua errors
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.frames > 0 and not self.mismatches and self.malformed == 0

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "connections": self.connections, "handshakes": self.handshakes, "frames": self.frames,
                "by_type": self.by_type, "malformed": self.malformed, "mismatches": self.mismatches[:20]}


def _tshark(pcap: Path, *args: str, dissector: Path | None = None) -> str:
    """tshark with exactly this dissector: a clean HOME, so a snek.lua the user installed among their personal
    plugins (``snekbed wireshark install``) or their preferences cannot take part in the check."""
    tshark = _need("tshark")
    with tempfile.TemporaryDirectory(prefix="snekbed-tshark-") as home:
        env = {**os.environ, "HOME": home, "XDG_CONFIG_HOME": str(Path(home) / ".config")}
        done = subprocess.run([tshark, "-r", str(pcap), "-X", f"lua_script:{dissector or dissector_path()}",
                               *TSHARK_ARGS, *args],
                              capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    if done.returncode != 0:
        raise CaptureError(f"tshark failed on {pcap}: {done.stderr.strip()[-800:]}")
    return done.stdout


def _hexkey(text: str) -> str:
    return text.replace(":", "")


def _listify(x: Any) -> list[Any]:
    return x if isinstance(x, list) else [x]


def _from_dissector(layer: dict[str, Any]) -> tuple:
    """One dissected item as a comparable tuple."""
    if "snek.handshake.key" in layer or "snek.handshake.version" in layer:
        return ("handshake", _hexkey(layer["snek.handshake.key"]), int(layer["snek.handshake.caps"], 16))
    t = int(layer["snek.type"], 16)
    item: dict[str, Any] = {"type": t, "hop_limit": int(layer["snek.hop_limit"]), "len": int(layer["snek.len"])}
    for name in ("snek.dest_key", "snek.src_key"):
        if name in layer:
            item[name.split(".")[1]] = _hexkey(layer[name])
    if "snek.watermark.seq" in layer:
        item["wm_seq"] = int(layer["snek.watermark.seq"])
    if t == _TREE:
        item["root"] = (_hexkey(layer["snek.ann.root_key"]), int(layer["snek.ann.root_seq"]))
        hops = _listify(layer.get("snek.ann.hop", []))
        item["hops"] = tuple((int(h["snek.ann.hop.port"]), _hexkey(h["snek.ann.hop.key"])) for h in hops)
    elif t == _BOOT:
        item["seq"] = int(layer["snek.bootstrap.seq"])
        item["root"] = (_hexkey(layer["snek.bootstrap.root_key"]), int(layer["snek.bootstrap.root_seq"]))
    elif t == _WAKEUP:
        item["seq"] = int(layer["snek.wakeup.seq"])
        item["root"] = (_hexkey(layer["snek.wakeup.root_key"]), int(layer["snek.wakeup.root_seq"]))
    elif t == _TRAFFIC:
        item["coords"] = (layer["snek.dest_coords"], layer["snek.src_coords"])
        if "snek.ping" in layer:
            ping = layer["snek.ping"]
            item["ping"] = (int(ping["snek.ping.type"]), int(ping["snek.ping.hops"]))
    elif t in _LEGACY_PATHS:
        item["root"] = (_hexkey(layer["snek.legacy.root_key"]), int(layer["snek.legacy.root_seq"]))
        item["path_id"] = _hexkey(layer["snek.legacy.path_id"])
    return ("frame", tuple(sorted(item.items())))


def _coords(c: tuple[int, ...]) -> str:
    return "[" + " ".join(str(p) for p in c) + "]"


def _from_codec(raw: bytes, fr: Frame) -> tuple:
    t = fr.type
    item: dict[str, Any] = {"type": t, "hop_limit": raw[_HOP_LIMIT_AT], "len": len(raw)}
    if t in (_BOOT, _TRAFFIC, *_LEGACY_PATHS):
        item["dest_key"] = fr.destination_key.hex()
    if t in (_TRAFFIC, _WAKEUP, *_LEGACY_PATHS):
        item["src_key"] = fr.source_key.hex()
    if t == _BOOT or (t == _TRAFFIC and not fr.destination_coords):
        item["wm_seq"] = fr.watermark.seq
    if t == _TREE:
        a = decode_announcement(fr.payload)
        item["root"] = (a.root_key.hex(), a.root_seq)
        item["hops"] = tuple((h.port, h.key.hex()) for h in a.hops)
    elif t in (_BOOT, _WAKEUP):
        p = decode_signed_root_payload(fr.payload)
        item["seq"] = p.seq
        item["root"] = (p.root_key.hex(), p.root_seq)
    elif t == _TRAFFIC:
        item["coords"] = (_coords(fr.destination_coords), _coords(fr.source_coords))
        pl = fr.payload
        if len(pl) >= wire.PING_LEN and pl[:8] == wire.PING_PREAMBLE:
            item["ping"] = (pl[_PING_TYPE_AT], int.from_bytes(pl[_PING_TYPE_AT + 1 : _PING_TYPE_AT + 3], "big"))
    elif t in _LEGACY_PATHS:
        p = decode_legacy_path_payload(fr.payload, t)
        item["root"] = (p.root_key.hex(), p.root_seq)
        item["path_id"] = p.path_id.hex()
    return ("frame", tuple(sorted(item.items())))


def _valid_header(data: bytes | bytearray, i: int) -> bool:
    """A frame header can start at ``i`` (the dissector's rule: magic, version 0, a length of at least 10)."""
    return len(data) >= i + wire.HEADER_LEN and data[i : i + 4] == wire.FRAME_MAGIC and \
        data[i + _VERSION_AT] == wire.FRAME_VERSION and \
        int.from_bytes(data[i + _LENGTH_AT : i + _LENGTH_AT + 2], "big") >= wire.HEADER_LEN


def _valid_handshake(data: bytes | bytearray, i: int) -> bool:
    """A handshake can start at ``i`` (§3.2: its version, then capabilities some known variant advertises)."""
    return len(data) >= i + 8 and data[i : i + 4] == _HANDSHAKE_HEAD and \
        int.from_bytes(data[i + 4 : i + 8], "big") in _KNOWN_CAPABILITIES


def _first_pdu(data: bytes, bounds: list[tuple[int, int]]) -> int | None:
    """Where a direction captured mid-stream lines up with a PDU, segment by segment as the dissector looks."""
    for start, end in bounds:
        if _valid_handshake(data, start) or _valid_header(data, start):
            return start
        for j in range(start + 1, end - 9):
            if _valid_header(data, j):
                return j
    return None


def check_capture(pcap: Path, *, dissector: Path | None = None) -> CaptureCheck:
    """Decode every snek connection of ``pcap`` with the dissector and with the project's codec; compare.

    ``dissector``: another Lua file than the shipped one (to test the check itself).
    Raises CaptureError when tshark is missing or cannot read the file.
    """
    result = CaptureCheck()
    bad = _tshark(pcap, "-Y", "snek.malformed || _ws.malformed || _ws.lua.error", "-T", "fields", "-e", "frame.number",
                  dissector=dissector)
    result.malformed = len([ln for ln in bad.splitlines() if ln.strip()])
    # the dissector's view, in packet order per (stream, source port)
    dissected: dict[tuple[str, str], list[tuple]] = defaultdict(list)
    packets = json.loads(_tshark(pcap, "-Y", "snek", "-T", "json", "--no-duplicate-keys", "-J", "snek tcp",
                                 dissector=dissector) or "[]")
    for pkt in packets:
        layers = pkt["_source"]["layers"]
        key = (layers["tcp"]["tcp.stream"], layers["tcp"]["tcp.srcport"])
        for layer in _listify(layers["snek"]):
            if "snek.continuation" in layer:
                continue  # the tail of a frame sent before the capture began
            try:
                dissected[key].append(_from_dissector(layer))
            except (KeyError, TypeError, ValueError) as exc:  # the dissector left out a field the codec has
                dissected[key].append(("incomplete", layer.get("snek.type"), f"no {exc}"))
    # the codec's view, from the reassembled bytes of each direction
    segments: dict[tuple[str, str], dict[int, bytes]] = defaultdict(dict)
    syn = set(_tshark(pcap, "-Y", "tcp.flags.syn == 1 && tcp.flags.ack == 0", "-T", "fields", "-e", "tcp.stream",
                      dissector=dissector).split())  # fmt: skip
    rows = _tshark(pcap, "-o", "tcp.relative_sequence_numbers:TRUE", "-Y", "tcp.len > 0", "-T", "fields",
                   "-e", "tcp.stream", "-e", "tcp.srcport", "-e", "tcp.seq", "-e", "tcp.payload",
                   dissector=dissector)  # fmt: skip
    for line in rows.splitlines():
        stream, sport, seq, payload = (line.split("\t") + ["", "", "", ""])[:4]
        if not payload:
            continue
        segments[(stream, sport)].setdefault(int(seq), bytes.fromhex(payload.replace(":", "")))
    for key, segs in segments.items():
        data = bytearray()
        bounds: list[tuple[int, int]] = []  # each segment's new bytes, as offsets into data
        expected = min(segs)
        from_start = key[0] in syn and expected == 1  # the capture saw the connection open
        for seq in sorted(segs):
            chunk = segs[seq]
            if seq + len(chunk) <= expected:
                continue  # a retransmission of bytes already placed
            start = len(data)
            data += chunk[max(0, expected - seq):]
            bounds.append((start, len(data)))
            expected = seq + len(chunk)
        ours: list[tuple] = []
        pos = 0 if from_start else _first_pdu(bytes(data), bounds)
        if pos is None:
            continue  # no frame starts in what was captured of this direction
        if _valid_handshake(data, pos):
            hs = bytes(data[pos : pos + HANDSHAKE_LEN])
            if len(hs) == HANDSHAKE_LEN:
                ours.append(("handshake", hs[8:40].hex(), int.from_bytes(hs[4:8], "big")))
                result.handshakes += 1
            pos += HANDSHAKE_LEN
        data = data[pos:]
        decoder = wire.FrameDecoder()
        try:
            for _t, raw in decoder.feed_raw(bytes(data)):
                fr = wire.decode_frame(raw)
                ours.append(_from_codec(raw, fr))
                name = frame_type_name(fr.type)
                result.by_type[name] = result.by_type.get(name, 0) + 1
                result.frames += 1
        except MalformedFrame as exc:
            result.mismatches.append(f"stream {key[0]} from port {key[1]}: the codec refused a frame: {exc}")
        result.connections += 1
        theirs = dissected.get(key, [])
        if len(theirs) != len(ours):
            result.mismatches.append(f"stream {key[0]} from port {key[1]}: dissector saw {len(theirs)} items, "
                                     f"the codec {len(ours)}")
        for i, (a, b) in enumerate(zip(theirs, ours)):
            if a != b:
                result.mismatches.append(f"stream {key[0]} from port {key[1]} item {i}: dissector {a} != codec {b}")
    return result
