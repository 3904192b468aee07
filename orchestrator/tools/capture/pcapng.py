"""Write snek byte streams as pcapng: the writer lives in :mod:`contract.pcapng` (the node writes the same format
for its flight recorder, and may not import the orchestrator); its names are re-exported here, where they were
first, beside :func:`write_streams` (docs/capture.md).
"""

from __future__ import annotations

from pathlib import Path

from contract.pcapng import LINKTYPE_RAW, PcapngWriter, TcpFlow

__all__ = ["LINKTYPE_RAW", "PcapngWriter", "TcpFlow", "write_streams"]


def write_streams(path: Path, streams: list[tuple[bytes, bytes]], *, mss: int = 1448) -> Path:
    """A pcapng of ``streams``: each (bytes the dialler wrote, bytes the listener wrote) as one connection."""
    with path.open("wb") as out:
        w = PcapngWriter(out)
        for i, (a_bytes, b_bytes) in enumerate(streams):
            flow = TcpFlow(w, (bytes([10, 77, 0, 2 * i + 1]), 40000 + i), (bytes([10, 77, 0, 2 * i + 2]), 7000),
                           mss=mss)  # fmt: skip
            flow.open(i)
            flow.send(i + 0.001, "a", a_bytes)
            flow.send(i + 0.002, "b", b_bytes)
            flow.close(i + 0.003)
    return path
