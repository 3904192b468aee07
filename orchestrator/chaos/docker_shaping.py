"""Link shaping that a Docker chaos run changes while it runs (orchestrator.chaos.docker_backend, which calls these
functions with itself, in a worker thread).

A link's shape is split by the run's shaping backend (netem.plan.userspace_part): the kernel part is applied from
the host in each end's network namespace (tc, iptables: orchestrator.backends.shaping), the userspace part by the
node's transport (its peer URI at start, ``POST /peers/shape`` later). The two are kept in step:

* ``link_change`` (:func:`change_link`): the new shape's kernel part replaces the old one at both ends, and each
  snekbed node is given the userspace part alone, every other field cleared (``null``), so that no part is applied
  twice (a rate in the kernel's tbf and again in the node's shaper) and none is left behind. A reference node's end
  has no userspace shaper: its userspace part is recorded as ``shaping_unapplied`` (docs/interop.md).
* a link connected again (``link_up``, ``heal``, a ``join``) or a node started again (``restart``, ``churn``): the
  engine gives the container a new interface, without the old one's qdisc, so :func:`reshape_ends` applies the
  kernel part of the link's current shape (the topology's, or the last ``link_change``'s) again. The node's part
  needs nothing: a snekbed node shapes a new peering with a key as ``POST /peers/shape`` last asked (docs/node.md),
  or as its URI says when nothing was asked (a restarted node starts from its URIs: see docs/netem.md).

Every end shaped is recorded as a ``link_shaped`` action and in the ``--json`` document's ``link_shapes``: the
link's shape, where the kernel runs each part (``kernel``, {} when it runs none there) and the shape the node said
its shaper now has (``userspace``; null where no node was asked).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from contract.links import LinkShape, resolve_class
from netem.plan import ShapingBackend, userspace_part

from orchestrator.backends.docker_net import LinkNet
from orchestrator.backends.docker_plan import link_shape
from orchestrator.backends.docker_session import unapplied_text
from orchestrator.backends.shaping import Endpoint, apply_endpoint

#: the Docker chaos backend these functions act for (orchestrator.chaos.docker_backend.DockerChaos)
DockerChaos = Any

__all__ = ["change_link", "current_shape", "reshape_ends"]


def current_shape(d: DockerChaos, index: int) -> LinkShape:
    """The shape link ``index`` has now: the last ``link_change``'s, else the topology's."""
    shape = d.link_shapes.get(index)
    return shape if shape is not None else link_shape(d.topology, index)


def _backend(d: DockerChaos, ln: LinkNet) -> ShapingBackend:
    """A link with a host node is shaped in userspace at both ends; the others as the run's backend says."""
    return "userspace" if ln.a in d.hosts or ln.b in d.hosts else d.shaping_backend


def _kernel(d: DockerChaos, ln: LinkNet, x: str, shape: LinkShape, backend: ShapingBackend) -> dict[str, str]:
    """Apply the kernel part of ``shape`` at ``x``'s end of ``ln`` (the old part replaced: qdisc, loss rules); where
    each part runs, or {} when the kernel has nothing to do there (userspace, a host node, a cut link, a node down).
    Raises ShapingError naming the command that failed."""
    if backend == "userspace" or x in d.hosts or ln.index in d.down_links or x in d.stopped | d.removed:
        return {}
    y = ln.peer_of(x)
    pid = int(d.docker.api.inspect_container(d._cid(x))["State"]["Pid"])
    done = apply_endpoint(Endpoint(str(ln.index), d.link_classes[frozenset((x, y))], shape, x, pid, ln.net.members[x],
                                   y, ln.net.members[y]), backend)  # fmt: skip
    return done.where


def _record(d: DockerChaos, ln: LinkNet, x: str, why: str, backend: ShapingBackend, where: dict[str, str],
            userspace: dict[str, Any] | None) -> None:  # fmt: skip
    y = ln.peer_of(x)
    entry = {"link": ln.index, "node": x, "peer": y, "why": why, "backend": backend,
             "shape": current_shape(d, ln.index).model_dump(exclude_defaults=True), "kernel": where,
             "userspace": userspace}  # fmt: skip
    d.report.setdefault("link_shapes", []).append(entry)
    d.run.action("link_shaped", f"{x}--{y}", entry)


def change_link(d: DockerChaos, a: str, b: str, link_class: str | None, shaping: dict[str, float]) -> None:
    """``link_change`` of ``a``--``b``: the class (``link_class``, else the link's current one) with ``shaping`` over
    it; its kernel part to both ends' kernels, its userspace part alone to each snekbed node (every field named, the
    kernel's cleared), the part a reference node cannot apply recorded. Raises ShapingError, AdminError."""
    assert d.plan is not None and d.session is not None and d._admin is not None
    cls = link_class or d.link_classes[frozenset((a, b))]
    shape = LinkShape(**{**resolve_class(cls, d.topology.classes or None).shape.model_dump(), **shaping})
    for ln in d.plan.links:
        if {ln.a, ln.b} != {a, b}:
            continue
        d.link_shapes[ln.index] = shape
        backend = _backend(d, ln)
        part = userspace_part(shape, backend)
        for x, y in ((a, b), (b, a)):
            where = _kernel(d, ln, x, shape, backend)
            userspace: dict[str, Any] | None = None
            if x in d.reference_nodes:
                _unapplied(d, ln, x, cls, backend, {k: v for k, v in part.model_dump().items() if v})
            else:
                body = {"peer": d.session.keys[y], "class": None, "shaping": part.model_dump()}
                answer = d._admin.post(x, "/peers/shape", body)
                userspace = next(iter((answer.get("shapes") or {}).values()), part.model_dump(exclude_defaults=True))
            _record(d, ln, x, "link_change", backend, where, userspace)


def _unapplied(d: DockerChaos, ln: LinkNet, x: str, cls: str, backend: ShapingBackend,
               fields: dict[str, Any]) -> None:  # fmt: skip
    """Record the part of a link_change a reference node's end leaves out (an action, --json, a line on stderr)."""
    if not fields:
        return
    y = ln.peer_of(x)
    entry = {"link": ln.index, "node": x, "peer": y, "class": cls, "unapplied": fields,
             "why": f"link_change: {x} runs the reference node (no userspace shaper); the {backend} backend leaves "
                    f"{', '.join(fields)} to the node"}  # fmt: skip
    d.report.setdefault("shaping_unapplied", []).append(entry)
    d.run.action("shaping_unapplied", f"{x}--{y}", entry)
    print(f"snekbed chaos: {unapplied_text(d.run.run_id, [entry])}", file=sys.stderr, flush=True)


def reshape_ends(d: DockerChaos, why: str, *, links: Iterable[int] = (), nodes: Iterable[str] = ()) -> None:
    """The kernel part of each link's current shape applied again at the ends that have a new interface: both ends
    of ``links`` (connected again) and every connected link end of ``nodes`` (started again). An end whose link
    was never shaped and never changed is left alone (nothing to restore). Raises ShapingError."""
    assert d.plan is not None
    started = set(nodes)
    ends = {(i, x) for i in links for x in (d.plan.links[i].a, d.plan.links[i].b)}
    ends |= {(ln.index, x) for ln in d.plan.links for x in (ln.a, ln.b) if x in started}
    for index, x in sorted(ends):
        ln = d.plan.links[index]
        shape, backend = current_shape(d, index), _backend(d, ln)
        if shape.is_noop and index not in d.link_shapes:
            continue
        where = _kernel(d, ln, x, shape, backend)
        if where:
            _record(d, ln, x, why, backend, where, None)
