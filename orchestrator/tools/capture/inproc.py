"""An in-process network's links as pcapng: ``snekbed sim --pcap FILE`` (docs/capture.md).

Each in-memory link becomes one TCP connection in the file (orchestrator/tools/capture/pcapng.py: LINKTYPE_RAW,
made-up IPv4 addresses ``10.<n>`` per node, the listener on port 7000). A link's connection opens, with both
nodes' real 104-byte handshakes (their keys, their variant's capabilities), just before its first frame;
every frame is recorded as its sender wrote it onto the link, at protocol time, whether or not the link then
loses it. So tshark with the project's dissector, and ``snekbed wireshark check``, read it like a capture
of TCP nodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from node.core.payloads import encode_handshake

from orchestrator.backends.inproc import InprocNetwork, LinkEnd
from orchestrator.tools.capture.pcapng import PcapngWriter, TcpFlow

__all__ = ["InprocPcap"]

LISTEN_PORT = 7000


class InprocPcap:
    """Writes every frame of ``net`` to ``path`` while attached; :meth:`close` ends every connection."""

    def __init__(self, net: InprocNetwork, path: Path) -> None:
        self.net = net
        self.path = path
        self._out: BinaryIO = path.open("wb")
        self.writer = PcapngWriter(self._out)
        self._addr: dict[str, bytes] = {}
        self._flows: dict[int, tuple[TcpFlow, str]] = {}  # link id -> (flow, name of the dialling side "a")
        self.frames = 0

    def _ip(self, node: str) -> bytes:
        if node not in self._addr:
            n = len(self._addr) + 1
            self._addr[node] = bytes([10, (n >> 16) & 0xFF, (n >> 8) & 0xFF, n & 0xFF])
        return self._addr[node]

    def attach(self) -> None:
        chained = self.net.on_wire

        def on_wire(end: LinkEnd, raw: bytes, now: float) -> None:
            self.record(end, raw, now)
            if chained is not None:
                chained(end, raw, now)

        self.net.on_wire = on_wire

    def record(self, end: LinkEnd, raw: bytes, now: float) -> None:
        entry = self._flows.get(end.link_id)
        if entry is None:
            dialler, listener = sorted((end.node, end.peer))  # as the Docker backend: the smaller name dials
            flow = TcpFlow(self.writer, (self._ip(dialler), 40000 + end.link_id % 20000),
                           (self._ip(listener), LISTEN_PORT))  # fmt: skip
            flow.open(now)
            for side, name in (("a", dialler), ("b", listener)):
                sn = self.net.nodes[name]
                flow.send(now, side, encode_handshake(sn.router.identity, sn.spec.capabilities))
            entry = self._flows[end.link_id] = (flow, dialler)
        flow, dialler = entry
        flow.send(now, "a" if end.node == dialler else "b", raw)
        self.frames += 1

    def close(self) -> None:
        for flow, _ in self._flows.values():
            flow.close(self.net.now)
        self._out.close()
