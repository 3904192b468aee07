"""Link shaping that a Docker chaos run changes while it runs (orchestrator.chaos.docker_backend, which calls these
functions with itself): the kernel part at a reference node's end, applied from the host because the reference
node has no userspace shaper (docs/interop.md)."""

from __future__ import annotations

import sys
from typing import Any

from contract.links import LinkShape, resolve_class
from netem.plan import ShapingBackend, userspace_part

from orchestrator.backends.docker_session import unapplied_text
from orchestrator.backends.shaping import Endpoint, apply_endpoint

#: the Docker chaos backend these functions act for (orchestrator.chaos.docker_backend.DockerChaos)
DockerChaos = Any

__all__ = ["reshape_reference_end"]


def reshape_reference_end(d: DockerChaos, x: str, y: str, link_class: str | None, shaping: dict[str, float]) -> None:
    """link_change at a reference node's end of x--y: the kernel part of the new shape applied in its namespace
    from the host (as at start), the part only a node's transport applies recorded as ``shaping_unapplied``
    (an action, the --json document's list, a line on stderr)."""
    assert d.plan is not None
    for ln in d.plan.links:
        if {ln.a, ln.b} != {x, y}:
            continue
        base = resolve_class(link_class or ln.link_class, d.topology.classes or None).shape
        shape = LinkShape(**{**base.model_dump(), **shaping})
        backend: ShapingBackend = "userspace" if y in d.hosts else d.shaping_backend
        if backend != "userspace" and ln.index not in d.down_links and x not in d.stopped | d.removed:
            pid = int(d.docker.api.inspect_container(d._cid(x))["State"]["Pid"])
            apply_endpoint(Endpoint(str(ln.index), link_class or ln.link_class, shape, x, pid,
                                    ln.net.members[x], y, ln.net.members[y]), backend)  # fmt: skip
        fields = {k: v for k, v in userspace_part(shape, backend).model_dump().items() if v}
        if fields:
            entry = {"link": ln.index, "node": x, "peer": y, "class": link_class or ln.link_class,
                     "unapplied": fields, "why": f"link_change: {x} runs the reference node (no userspace "
                     f"shaper); the {backend} backend leaves {', '.join(fields)} to the node"}  # fmt: skip
            d.report.setdefault("shaping_unapplied", []).append(entry)
            d.run.action("shaping_unapplied", f"{x}--{y}", entry)
            print(f"snekbed chaos: {unapplied_text(d.run.run_id, [entry])}", file=sys.stderr, flush=True)
