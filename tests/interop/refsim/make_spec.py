"""Write the same partition and heal for refsim (the reference's routers) and for `snekbed chaos` (ours).

    .venv/bin/python tests/interop/refsim/make_spec.py TOPOLOGY.yaml START SIZE SPEC.json SCENARIO.yaml [--repeat N]

The partition cuts the connected chunk of SIZE nodes found breadth-first from START (neighbours in name order)
off the rest; on a tree-like graph the rest falls apart into many components. SPEC.json is refsim's input
(tests/interop/refsim/main.go), SCENARIO.yaml a chaos scenario with the same groups: wait until converged,
partition, heal 5 s after the partition's step ends. Prints the chunk's size, the links cut and the components
left. Exit 2 for bad input. docs/chaos.md, "What a heal of many components needs".
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import yaml


def chunk_partition(nodes: list[str], links: list[tuple[str, str]], start: str,
                    size: int) -> tuple[list[str], list[list[str]], int]:
    """(the chunk, the links cut, the number of components left)."""
    adj: dict[str, list[str]] = collections.defaultdict(list)
    for a, b in links:
        adj[a].append(b)
        adj[b].append(a)
    chunk, queue, seen = [start], collections.deque([start]), {start}
    while queue and len(chunk) < size:
        for y in sorted(adj[queue.popleft()]):
            if y not in seen and len(chunk) < size:
                seen.add(y)
                chunk.append(y)
                queue.append(y)
    cut = [[a, b] for a, b in links if (a in seen) != (b in seen)]
    parent = {n: n for n in nodes}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in links:
        if (a in seen) == (b in seen):
            parent[find(a)] = find(b)
    return chunk, cut, len({find(n) for n in nodes})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("topology", type=Path)
    ap.add_argument("start")
    ap.add_argument("size", type=int)
    ap.add_argument("spec", type=Path)
    ap.add_argument("scenario", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--horizon-s", type=float, default=300.0)
    ap.add_argument("--poll-s", type=float, default=0.5)
    args = ap.parse_args(argv)
    try:
        topo = yaml.safe_load(args.topology.read_text())
        nodes = [str(n) for n in topo["nodes"]]
        links = [(str(link["a"]), str(link["b"])) for link in topo["links"]]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        print(f"{args.topology}: not a topology with nodes and links ({exc})", file=sys.stderr)
        return 2
    if args.start not in nodes:
        print(f"{args.topology}: START: no node {args.start!r}", file=sys.stderr)
        return 2
    chunk, cut, comps = chunk_partition(nodes, links, args.start, args.size)
    rest = [n for n in nodes if n not in set(chunk)]
    spec = {"nodes": nodes, "links": [list(link) for link in links], "cut": cut, "repeat": args.repeat,
            "seed": 1, "horizon_s": args.horizon_s, "poll_s": args.poll_s}
    args.spec.write_text(json.dumps(spec))
    args.scenario.write_text(
        f"name: many-components-heal\n"
        f"description: cut the {len(chunk)} nodes around {args.start} off the rest ({comps} components), then heal\n"
        f"settle_s: 3\nsteps:\n"
        f"  - {{action: wait, until: converged, within_s: 300}}\n"
        f"  - {{action: partition, groups: [{json.dumps(chunk)}, {json.dumps(rest)}]}}\n"
        f"  - {{action: heal, after_s: 5}}\n")
    print(json.dumps({"chunk": len(chunk), "cut": len(cut), "components": comps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
