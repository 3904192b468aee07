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
* an adversary's drops: ``snek_dropped_frames{reason="adversary"}`` and ``snek_received_frames`` of the frame types it
  drops, from the node's own /metrics, read inside its container (a reference node's too: it serves the series
  under the same name, and its image has python3); for an adversary limited to one peer, the frames received from
  that peer and dropped, from the node's flight recorder (``GET /recorder``) on its ports to that peer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import trio

from contract.links import LinkShape, resolve_class
from netem.measure import MeasureError, exec_python
from orchestrator.backends.docker_observe import AdminError
from orchestrator.backends.docker_plan import NODE_METRICS_PORT
from orchestrator.backends.shaping import load_record
from orchestrator.tools.links_check import CheckOptions, Side, check_link

#: the Docker chaos backend these functions read (orchestrator.chaos.docker_backend.DockerChaos, which imports them)
DockerChaos = Any

__all__ = ["adversary_counts", "beside", "measure_link", "peer_keys", "probe"]

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

_COUNTS = r"""
import json, sys, urllib.request
a = json.loads(sys.argv[1])
text = urllib.request.urlopen(a["url"], timeout=3).read().decode()
def of_kinds(line):
    return a["kinds"] is None or any(f'type="{k}"' in line for k in a["kinds"])
n = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
        if line.startswith("snek_dropped_frames") and 'reason="adversary"' in line and of_kinds(line))
rx = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("snek_received_frames")
      and of_kinds(line)]
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


async def adversary_counts(d: DockerChaos, names: Iterable[str], kinds: Iterable[str], peer: str | None,
                           since: float | None) -> dict[str, tuple[int, int] | str]:  # fmt: skip
    """``(received, dropped)`` frames of ``kinds`` for each node (orchestrator.chaos.backend.Observation): from
    every peer so far (its own /metrics, read inside its container), or from ``peer`` since ``since`` (its flight
    recorder, ``GET /recorder?last_s=``, on the ports its ``GET /state`` gives ``peer``)."""
    kinds = tuple(kinds)
    out: dict[str, tuple[int, int] | str] = {}
    for n in names:
        if peer is None:
            out[n] = await _metric_counts(d, n, kinds)
        elif n in d.reference_nodes:
            out[n] = f"frames from {peer} are not told apart from other peers': {n} runs the Pinecone reference, " \
                     "which keeps no flight recorder"
        else:
            last_s = max(0.001, d.now() - since) if since is not None else 3600.0
            out[n] = await trio.to_thread.run_sync(_from_peer, d, n, peer, kinds, last_s)
    return out


async def _metric_counts(d: DockerChaos, name: str, kinds: tuple[str, ...]) -> tuple[int, int] | str:
    box = _container(d, name)  # a reference node counts them too, under the same name (docs/interop.md)
    if box is None:
        return f"{name}'s container cannot be reached from this engine"
    args = {"url": f"http://127.0.0.1:{NODE_METRICS_PORT}/metrics", "kinds": None if "all" in kinds else list(kinds)}
    try:
        got = await trio.to_thread.run_sync(lambda: exec_python(box, _COUNTS, args, what="drops"))
    except MeasureError as exc:
        return f"{name}'s /metrics could not be read: {exc}"
    if got["received"] is None:
        return f"{name} does not count the frames it receives by type"
    return int(got["received"]), int(got["dropped"])


def _from_peer(d: DockerChaos, name: str, peer: str, kinds: tuple[str, ...], last_s: float) -> tuple[int, int] | str:
    """From ``name``'s flight recorder: the frames of ``kinds`` it received on its ports to ``peer`` in the last
    ``last_s`` seconds, and those its adversary dropped. Blocks: run it in a thread."""
    assert d._admin is not None and d.session is not None
    key = d.session.keys.get(peer)
    try:
        ports = {p["port"] for p in d._admin.state(name).get("peers", []) if p.get("key") == key}
        text = d._admin.get_bytes(name, f"/recorder?last_s={last_s:.3f}").decode()
    except AdminError as exc:
        return f"frames from {peer} are not told apart from other peers': {exc}"
    wanted = None if "all" in kinds else set(kinds)
    rx = dropped = 0
    for raw in text.splitlines():
        line = json.loads(raw)
        if line.get("port") not in ports or (wanted is not None and line.get("frame_type") not in wanted):
            continue
        if line["kind"] == "received":
            rx += 1
        elif line["kind"] == "dropped" and line.get("reason") == "adversary":
            dropped += 1
    return rx, dropped


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
