"""The flight recorder in a chaos run: when a step fails or is invalid, every live node's ring goes into the run.

Each node keeps the last seconds of the frames it received, sent, forwarded and dropped, headers only, with its
routing events (node.core.recorder; docs/chaos.md, "Flight recorder"). The runner asks the backend for them
(``flight_records``, orchestrator.chaos.backend.Observation) right after the step's verdict and writes each
node's as ``recorder/<step>-<node>.jsonl`` (contract.recorder) and ``recorder/<step>-<node>.pcapng`` (node.flight)
in the run directory; the step's record names the files (``recorder``) and says why a node has none
(``recorder_unavailable``).

* :func:`from_network`: the in-process nodes' rings, read directly (nothing is sent, no time passes, no random
  number is drawn: the run goes on as it would have);
* :func:`from_admin`: a Docker run's nodes, through their admin APIs (``GET /recorder``, ``GET
  /recorder.pcapng``); a node of the Pinecone reference has none;
* :func:`write_dumps`: into the run directory.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from node.flight import read_out, to_jsonl, to_pcapng

from orchestrator.backends.docker_observe import AdminClient, AdminError
from orchestrator.backends.inproc import InprocNetwork
from orchestrator.chaos.backend import FlightDump

__all__ = ["RECORDER_DIR", "REFERENCE_NODE", "from_admin", "from_network", "write_dumps"]

#: the run directory's folder of dumps
RECORDER_DIR = "recorder"
#: why a node of the Pinecone reference has no dump
REFERENCE_NODE = "not available: the Pinecone reference node (Go) keeps no flight recorder"


def from_network(net: InprocNetwork, names: Iterable[str]) -> dict[str, FlightDump | str]:
    """Each named in-process node's flight recorder as it is at the network's ``now``, or why there is none."""
    out: dict[str, FlightDump | str] = {}
    now = net.now
    for name in names:
        node = net.nodes.get(name)
        if node is None or not node.alive:
            out[name] = "not available: the node is not running"
        elif node.recorder is None:
            out[name] = "not available: the flight recorder is off"
        else:
            records = read_out(node.recorder.entries(now), now, node.key, name)
            out[name] = FlightDump(to_jsonl(records), to_pcapng(records, now))
    return out


def from_admin(admin: AdminClient, names: Iterable[str], reference: Collection[str]) -> dict[str, FlightDump | str]:
    """Each named node's flight recorder through its admin API (the JSON lines, then the pcapng: two reads a few
    milliseconds apart), or why there is none. Blocks: run it in a thread."""
    out: dict[str, FlightDump | str] = {}
    for name in names:
        if name in reference:
            out[name] = REFERENCE_NODE
            continue
        try:
            out[name] = FlightDump(admin.get_bytes(name, "/recorder"), admin.get_bytes(name, "/recorder.pcapng"))
        except AdminError as exc:
            out[name] = f"not available: {exc}"
    return out


def write_dumps(run_dir: Path, step: int, dumps: Mapping[str, FlightDump | str]) -> tuple[list[str], list[str]]:
    """Write step ``step``'s dumps under ``run_dir/recorder/``: (the files written, relative to ``run_dir``; one
    ``"node: why"`` for each node without a dump), in node-name order."""
    written: list[str] = []
    missing: list[str] = []
    for name in sorted(dumps):
        dump = dumps[name]
        if isinstance(dump, str):
            missing.append(f"{name}: {dump}")
            continue
        (run_dir / RECORDER_DIR).mkdir(parents=True, exist_ok=True)
        for suffix, data in (("jsonl", dump.jsonl), ("pcapng", dump.pcapng)):
            rel = f"{RECORDER_DIR}/{step}-{name}.{suffix}"
            (run_dir / rel).write_bytes(data)
            written.append(rel)
    return written, missing
