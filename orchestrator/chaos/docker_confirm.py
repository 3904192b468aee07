"""What a fault's confirmation measures on Docker (orchestrator.chaos.confirm), through the nodes and their links.

* control plane: each node's ``GET /state`` (its up peers' keys), asked whatever the run believes of the node;
* data plane, link by link: a datagram from one end's container to the other end's address on their link's
  network, to the discard port: the far kernel answers (port unreachable, or anything) when the link carries,
  nothing answers when it is cut. The nodes see nothing of it. A host node's link is probed from this machine
  (its end) to the container's address. Where a container cannot be reached from this engine (a swarm task
  elsewhere), a ping through the overlay instead (not one of the run's pings:
  it is not recorded);
* a link's shape: the links check (orchestrator.tools.links_check) on the link, against the new shape, with its
  tolerances (RTT by node pings; loss and rate where the kernel shapes them);
* an adversary's drops: ``snek_dropped_frames{reason="adversary"}`` of the node's own /metrics, read inside its
  container (a reference node's too: it serves the series under the same name, and its image has python3).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import trio

from contract.frames import FRAME_TYPE_NAMES
from contract.links import LinkShape, resolve_class
from netem.measure import MeasureError, exec_python
from orchestrator.backends.docker_plan import NODE_METRICS_PORT
from orchestrator.backends.shaping import load_record
from orchestrator.tools.links_check import CheckOptions, Side, check_link

#: the Docker chaos backend these functions read (orchestrator.chaos.docker_backend.DockerChaos, which imports them)
DockerChaos = Any

__all__ = ["beside", "drop_counts", "measure_link", "peer_keys", "probe", "received_counts"]

_UDP_PROBE = r"""
import json, socket, sys
a = json.loads(sys.argv[1])
out = []
for ip in a["ips"]:
    ok = False
    for _ in range(a["tries"]):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(a["timeout_s"])
        try:
            s.connect((ip, 9))
            s.send(b"snekbed-confirm")
            s.recv(64)
            ok = True
        except ConnectionRefusedError:
            ok = True
        except OSError:
            pass
        finally:
            s.close()
        if ok:
            break
    out.append(ok)
print(json.dumps({"reached": out}))
"""

_DROPS = r"""
import json, sys, urllib.request
a = json.loads(sys.argv[1])
text = urllib.request.urlopen(a["url"], timeout=3).read().decode()
n = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
        if line.startswith("snek_dropped_frames") and 'reason="adversary"' in line)
rx = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("snek_received_frames")
      and any(f'type="{k}"' in line for k in a["kinds"])]
print(json.dumps({"dropped": n, "received": sum(rx) if rx else None}))
"""


async def peer_keys(d: DockerChaos, names: Iterable[str]) -> dict[str, frozenset[bytes] | None]:
    assert d._admin is not None
    names = list(names)
    docs = await trio.to_thread.run_sync(d._admin.states, names)
    return {n: None if docs.get(n) is None else frozenset(bytes.fromhex(p["key"]) for p in docs[n].get("peers", []))
            for n in names}  # fmt: skip


def _container(d: DockerChaos, name: str) -> Any:
    if name in d.hosts:
        return None
    try:
        return d.docker.client.containers.get(d._cid(name))
    except Exception:  # a task on another swarm node, a container gone: no exec from here
        return None


def _link_ip(d: DockerChaos, a: str, b: str) -> str | None:
    assert d.plan is not None
    for ln in d.plan.links:
        if {ln.a, ln.b} == {a, b}:
            return ln.net.members.get(b)
    return None


def _probe_from_host(d: DockerChaos, host: str, other: str, timeout_s: float) -> bool | None:
    """The datagram probe over a host node's link, sent from this machine (the host end: the link network's
    gateway) to the container end's address on the link. Not from the container to the gateway: with the
    container off the link network its default route still reaches the host, which answers for every address it
    has, and a cut link would look carried."""
    ip = _link_ip(d, host, other)
    if ip is None or other in d.hosts:
        return None
    args = {"ips": [ip], "tries": 3, "timeout_s": timeout_s / 3}
    done = subprocess.run([sys.executable, "-c", _UDP_PROBE, json.dumps(args)], capture_output=True, text=True,
                          timeout=timeout_s + 10)  # fmt: skip
    if done.returncode != 0:
        return None
    return bool(json.loads(done.stdout)["reached"][0])


def _probe_one(d: DockerChaos, a: str, b: str, timeout_s: float) -> bool | None:
    """The datagram probe over the link ``a``--``b``: from the end and to the address the backend names
    (``probe_route``: on Docker from ``a``'s container to ``b``'s address on the link; on a swarm from the dialer
    to the listener's alias; from this machine when an end is a host node); None when it cannot be run here."""
    if a in d.hosts or b in d.hosts:
        return _probe_from_host(d, *((a, b) if a in d.hosts else (b, a)), timeout_s)
    route = d.probe_route(a, b)
    if route is None:
        return None
    a, ip = route
    box = _container(d, a)
    if ip is None or box is None:
        return None
    try:
        got = exec_python(box, _UDP_PROBE, {"ips": [ip], "tries": 3, "timeout_s": timeout_s / 3}, what="link probe")
    except MeasureError:
        return None
    return bool(got["reached"][0])


async def probe(d: DockerChaos, pairs: list[tuple[str, str]], timeout_s: float) -> list[bool]:
    out: list[bool | None] = [None] * len(pairs)

    async def one(i: int, a: str, b: str) -> None:
        out[i] = await trio.to_thread.run_sync(_probe_one, d, a, b, timeout_s)

    async with trio.open_nursery() as nursery:
        for i, (a, b) in enumerate(pairs):
            nursery.start_soon(one, i, a, b)
    todo = [i for i, x in enumerate(out) if x is None]
    if todo:  # no container to probe from: a ping through the overlay, not recorded among the run's pings
        pinged = await d._ping_jobs([(*pairs[i], "snek") for i in todo], timeout_s)
        for i, (_, res) in zip(todo, pinged):
            out[i] = bool(res and res.get("received"))
    return [bool(x) for x in out]


async def _metric_counts(d: DockerChaos, names: Iterable[str], key: str,
                         kinds: Iterable[str] = ()) -> dict[str, int | None]:  # fmt: skip
    """``key`` ("dropped": the adversary's drops; "received": frames of ``kinds`` received) from each node's own
    /metrics, read inside its container."""
    kinds = list(FRAME_TYPE_NAMES) if "all" in kinds else sorted(kinds)
    out: dict[str, int | None] = {}
    for n in names:
        box = _container(d, n)  # a reference node counts them too, under the same name (docs/interop.md)
        if box is None:
            out[n] = None
            continue
        args = {"url": f"http://127.0.0.1:{NODE_METRICS_PORT}/metrics", "kinds": kinds}
        try:
            got = await trio.to_thread.run_sync(lambda box=box: exec_python(box, _DROPS, args, what="drops"))
            out[n] = None if got[key] is None else int(got[key])
        except MeasureError:
            out[n] = None
    return out


async def drop_counts(d: DockerChaos, names: Iterable[str]) -> dict[str, int | None]:
    return await _metric_counts(d, names, "dropped")


async def received_counts(d: DockerChaos, names: Iterable[str], kinds: Iterable[str]) -> dict[str, int | None]:
    return await _metric_counts(d, names, "received", kinds)


def _measure(d: DockerChaos, a: str, b: str, shape: LinkShape, link_class: str) -> dict[str, Any]:
    assert d.plan is not None and d.session is not None
    boxes = [_container(d, n) for n in (a, b)]
    if None in boxes or a in d.reference_nodes or b in d.reference_nodes:
        return {"pass": None, "how": f"{a}--{b}: an end is not a snekbed container on this engine"}
    metrics = ["rtt"]
    if d.shaping_backend != "userspace":  # the kernel shapes loss and rate: datagrams and a transfer see them
        metrics += ["loss"] + (["rate"] if shape.rate_mbit is not None else [])
    sides = [Side(n, box, str(_link_ip(d, m, n)), d.session.keys.get(n)) for n, m, box in ((a, b, boxes[0]),
                                                                                               (b, a, boxes[1]))]
    record = load_record(d.run.path / "shaping.json")
    res = check_link(f"{a}--{b}", link_class, shape, d.shaping_backend, sides[0], sides[1],
                     capabilities=record.capabilities if record else {}, where={},
                     options=CheckOptions(metrics=tuple(metrics), rtt_samples=30, loss_probes=1000, transfer_s=1.0,
                                          rate_attempts=2))  # fmt: skip
    said = ", ".join(f"{m} {'pass' if c.get('pass') else 'FAILED'}" + (f" ({c['error']})" if c.get("error") else "")
                     for m, c in res.checks.items())  # fmt: skip
    left = "" if len(metrics) == 3 else f"; not measured: {', '.join(sorted({'loss', 'rate'} - set(metrics)))} " \
                                        f"({d.shaping_backend} shaping is applied by the nodes to their own frames)"
    return {"pass": res.passed, "checks": res.checks, "got": res.got,
            "how": f"the links check on the link: {said}; got {res.got}{left}"}


async def measure_link(d: DockerChaos, a: str, b: str, link_class: str | None,
                       shaping: Mapping[str, float] | None) -> dict[str, Any]:  # fmt: skip
    cls = link_class or d.link_classes.get(frozenset((a, b))) or "pipe"
    base = resolve_class(cls, d.topology.classes or None).shape
    shape = LinkShape(**{**base.model_dump(), **dict(shaping or {})}) if shaping else base
    return await trio.to_thread.run_sync(_measure, d, a, b, shape, cls)


def beside(d: DockerChaos, poll: Callable[[], Awaitable[bool]], every_s: float, until: float) -> None:
    async def loop() -> None:
        while True:
            t = time.monotonic()
            if await poll() or time.monotonic() >= until:
                return
            await trio.sleep(max(0.0, every_s - (time.monotonic() - t)))

    assert d._nursery is not None
    d._nursery.start_soon(loop)
