"""Address plans and Docker networks for one run of the Docker backend.

A run gets ONE aligned block of a configurable pool (default ``10.213.0.0/16``),
chosen so it overlaps no existing Docker network and no host route: the first free
one from a place in the pool the run id picks (a hash), so the next run does not take
the block the last one just gave back (a swarm's workers drop a removed overlay
network some time after the manager does: a task on one that still has it is
rejected, "Pool overlaps with other one on this address space"). Inside the
block, carved largest first so every subnet stays aligned:

* the **control** network: a non-internal bridge holding every node (admin API,
  metrics, reachable from the host); sized for the node count, at least /26;
* one **LAN segment** (internal bridge) shared by the nodes marked
  ``multicast: true``, where they find each other by multicast discovery
  (PROTOCOL.md appendix A); only when such nodes exist;
* one internal **/29 per link**: gateway ``.1``, endpoint ``a`` ``.2``, ``b`` ``.3``.
  Peering happens only on these, so the overlay sees exactly the topology's links.

**Host nodes** (``host: true``, run by the user outside Docker) get no control
address and no container: on a link to a container the host itself is that link
network's gateway (``.1``), which reaches the container's address directly; their
planned endpoint address stays reserved and unused.

Planning is pure (:func:`plan_addresses`); :func:`create_networks` and
:func:`remove_networks` talk to the engine. Every network carries the labels
``snekbed.run=<id>`` and ``snekbed.role=control|lan|link`` (links also
``snekbed.link=<index>``), so cleanup goes by label and never by name.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.model.hosting import radio_carriers
from orchestrator.model.topology import Topology

if TYPE_CHECKING:
    import docker

__all__ = [
    "DEFAULT_POOL",
    "LINK_PREFIX",
    "LABEL_RUN",
    "LABEL_ROLE",
    "LABEL_LINK",
    "DockerBackendError",
    "AddressPoolExhausted",
    "Subnet",
    "LinkNet",
    "AddressPlan",
    "plan_addresses",
    "taken_subnets",
    "host_routes",
    "network_lock",
    "ENDPOINT_CHANGES",
    "create_networks",
    "remove_networks",
    "STALE_COUNT",
    "network_name",
    "link_labels",
    "link_from_labels",
]

DEFAULT_POOL = "10.213.0.0/16"
LINK_PREFIX = 29  # network, gateway, two endpoints, broadcast: /30 has no room for Docker's gateway
MIN_CONTROL_PREFIX = 26
LABEL_RUN = "snekbed.run"
LABEL_NODE = "snekbed.node"
LABEL_ROLE = "snekbed.role"
LABEL_LINK = "snekbed.link"
REMOVE_ATTEMPTS = 6
REMOVE_BACKOFF_S = 0.25
#: What ``remove_networks`` adds to a removal's error when the engine refuses it for "active endpoints" and lists
#: none attached: the engine's endpoint count is stale (see ENDPOINT_CHANGES). Scripts and tests match on it.
STALE_COUNT = "the engine's endpoint count for this network is stale"

#: Held around every engine call of this process that adds or removes endpoints of a run's networks while other
#: such calls could run: starting a container, SIGKILL (the engine returns once the container's endpoints are
#: released), connecting or disconnecting a running container, and the whole of a teardown's stop and removal.
#: Docker 20.10 keeps a count of each network's endpoints (libnetwork's endpoint_cnt) that can lose an update when
#: endpoints of one network are created and deleted at the same moment; the network then "has active endpoints"
#: with none attached, and only an engine restart clears it ("Fixing inconsistent endpoint_cnt ... Expected=0,
#: Actual=2" in the engine's log; the count was dropped in Docker 28.1). Reproduced on this machine: one stuck
#: network in 25 rounds of 12 containers on one network started and killed at random, all at once; none in 40
#: rounds of 16 starts at once, nor of 16 kills at once. So creations never overlap deletions here (concurrent
#: deletions, a teardown's exits, still do). Re-entrant: a teardown holds it while its helpers take it again.
ENDPOINT_CHANGES = threading.RLock()

Net = ipaddress.IPv4Network


class DockerBackendError(Exception):
    """Base: the Docker backend could not do what was asked; the message says what and where."""


class AddressPoolExhausted(DockerBackendError):
    """No free block of the pool is large enough for the run."""

    def __init__(self, pool: str, size: int, reason: str) -> None:
        super().__init__(f"address pool {pool}: no free /{32 - int(math.log2(size))} block for this run ({reason}); "
                         "pass another --address-pool or remove finished runs with `snekbed down --run-id ID`")
        self.pool, self.size = pool, size


@dataclass(frozen=True, slots=True)
class Subnet:
    """One Docker network's subnet, its gateway and the address of each member node."""

    name: str
    role: str  # control | lan | link
    subnet: str
    gateway: str
    members: dict[str, str] = field(default_factory=dict)  # node name -> address

    @property
    def network(self) -> Net:
        return ipaddress.IPv4Network(self.subnet)


@dataclass(frozen=True, slots=True)
class LinkNet:
    """The /29 of ``links[index]``: ``a`` dials ``b`` (the lexicographically smaller name dials)."""

    index: int
    a: str
    b: str
    link_class: str
    net: Subnet

    @property
    def ip_a(self) -> str:
        return self.net.members[self.a]

    @property
    def ip_b(self) -> str:
        return self.net.members[self.b]

    @property
    def dialer(self) -> str:
        return min(self.a, self.b)

    @property
    def listener(self) -> str:
        return max(self.a, self.b)

    def peer_of(self, node: str) -> str:
        """The other end. Raises ValueError when ``node`` is not an end."""
        if node == self.a:
            return self.b
        if node == self.b:
            return self.a
        raise ValueError(f"{node!r} is not an end of link {self.index} ({self.a}-{self.b})")


@dataclass(frozen=True, slots=True)
class AddressPlan:
    """Every subnet and address of one run."""

    run_id: str
    block: str
    control: Subnet
    lan: Subnet | None
    links: list[LinkNet]
    host_nodes: tuple[str, ...] = ()  # nodes run outside Docker: no control address, no container
    #: each radio's shared segment (docs/mobility.md, "On Docker"): its carriers' addresses, by radio name
    radios: dict[str, Subnet] = field(default_factory=dict)

    def is_host(self, node: str) -> bool:
        return node in self.host_nodes

    def networks(self) -> list[Subnet]:
        """Control first, then the LAN segment, then the links in index order, then the radios' segments."""
        return [self.control, *([self.lan] if self.lan else []), *(ln.net for ln in self.links),
                *self.radios.values()]

    def control_ip(self, node: str) -> str:
        return self.control.members[node]

    @property
    def monitor_ip(self) -> str:
        """The control network's last host address, reserved (never a node's) for the run's Prometheus."""
        return str(self.control.network.broadcast_address - 1)

    @property
    def grafana_ip(self) -> str:
        """The address before :attr:`monitor_ip`, reserved for a Grafana next to that Prometheus."""
        return str(self.control.network.broadcast_address - 2)

    def links_of(self, node: str) -> list[LinkNet]:
        return [ln for ln in self.links if node in (ln.a, ln.b)]

    def to_dict(self) -> dict[str, object]:
        return {
            "block": self.block,
            "control": {"subnet": self.control.subnet, "gateway": self.control.gateway, "nodes": self.control.members},
            "lan": None if self.lan is None else {"subnet": self.lan.subnet, "nodes": self.lan.members},
            "host_nodes": list(self.host_nodes),
            "links": [{"index": ln.index, "a": ln.a, "b": ln.b, "class": ln.link_class, "subnet": ln.net.subnet,
                       "ip_a": ln.ip_a, "ip_b": ln.ip_b, "network": ln.net.name} for ln in self.links],
            **({"radios": {name: {"subnet": r.subnet, "network": r.name, "nodes": r.members}
                           for name, r in self.radios.items()}} if self.radios else {}),
        }


def link_labels(run_id: str, ln: LinkNet) -> dict[str, str]:
    """The labels of ``ln``'s network: the run, the role, the link's index, ends and class (read back by
    :func:`link_from_labels` wherever a run's links are found from the engine alone)."""
    return {LABEL_RUN: run_id, LABEL_ROLE: "link", LABEL_LINK: str(ln.index), "snekbed.a": ln.a, "snekbed.b": ln.b,
            "snekbed.class": ln.link_class}


def link_from_labels(labels: Mapping[str, str]) -> tuple[int, str, str, str]:
    """A link network's (index, a, b, class) from its labels (-1 and "" where one is missing)."""
    return (int(labels.get(LABEL_LINK, -1)), labels.get("snekbed.a", ""), labels.get("snekbed.b", ""),
            labels.get("snekbed.class", ""))


def network_name(run_id: str, role: str, index: int | None = None) -> str:
    """``snekbed-<run>-ctl``, ``snekbed-<run>-lan``, ``snekbed-<run>-l<index>``, ``snekbed-<run>-r<index>`` (the
    index-th radio's segment)."""
    if role == "control":
        return f"snekbed-{run_id}-ctl"
    if role == "lan":
        return f"snekbed-{run_id}-lan"
    if role == "radio":
        return f"snekbed-{run_id}-r{index}"
    return f"snekbed-{run_id}-l{index}"


def _prefix_for(hosts: int, minimum_prefix: int) -> int:
    """The longest prefix (no longer than ``minimum_prefix``) holding network, gateway, broadcast and ``hosts``."""
    return min(minimum_prefix, 32 - math.ceil(math.log2(hosts + 3)))


def _overlaps(candidate: Net, taken: Iterable[Net]) -> Net | None:
    for net in taken:
        if candidate.overlaps(net):
            return net
    return None


def plan_addresses(topology: Topology, run_id: str, *, pool: str = DEFAULT_POOL,
                   taken: Iterable[Net] = ()) -> AddressPlan:
    """Carve a block for ``topology`` out of ``pool`` that overlaps nothing in ``taken``.

    Pure: pass :func:`taken_subnets` (Docker networks and host routes) as ``taken``.
    Raises DockerBackendError for a pool that is not an IPv4 network, and
    AddressPoolExhausted when no block fits.
    """
    try:
        pool_net = ipaddress.IPv4Network(pool)
    except ValueError as exc:
        raise DockerBackendError(f"--address-pool {pool!r}: not an IPv4 network ({exc})") from None
    host_nodes = tuple(n.name for n in topology.nodes if n.host)
    names = [n for n in topology.node_names if n not in host_nodes]
    multicast = [n.name for n in topology.nodes if n.multicast and not n.host]
    control_prefix = _prefix_for(len(names) + 2, MIN_CONTROL_PREFIX)  # + monitor_ip and grafana_ip
    sizes = [2 ** (32 - control_prefix)]
    if multicast:
        sizes.append(2 ** (32 - _prefix_for(len(multicast), MIN_CONTROL_PREFIX)))
    sizes += [2 ** (32 - LINK_PREFIX)] * len(topology.links)
    carriers = radio_carriers(topology)
    radio_sizes = {name: 2 ** (32 - _prefix_for(len(members), LINK_PREFIX)) for name, members in carriers.items()}
    sizes += list(radio_sizes.values())
    block_size = 2 ** math.ceil(math.log2(_aligned_end(sizes)))
    if block_size > pool_net.num_addresses:
        raise AddressPoolExhausted(pool, block_size, f"the pool has only {pool_net.num_addresses} addresses")
    taken = list(taken)
    block = None
    blocks = pool_net.num_addresses // block_size
    first = int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:8], "big") % blocks  # where this run starts
    for i in range(blocks):
        candidate = ipaddress.IPv4Network((int(pool_net.network_address) + ((first + i) % blocks) * block_size,
                                           32 - int(math.log2(block_size))))  # fmt: skip
        if _overlaps(candidate, taken) is None:
            block = candidate
            break
    if block is None:
        raise AddressPoolExhausted(pool, block_size, f"all {len(taken)} known subnets considered")

    cursor = int(block.network_address)

    def carve(size: int) -> Net:
        nonlocal cursor
        cursor = -(-cursor // size) * size  # a subnet starts on a multiple of its size
        net = ipaddress.IPv4Network((cursor, 32 - int(math.log2(size))))
        cursor += size
        return net

    def subnet(name: str, role: str, net: Net, members: list[str]) -> Subnet:
        hosts = list(net.hosts())
        return Subnet(name, role, str(net), str(hosts[0]), {m: str(hosts[i + 1]) for i, m in enumerate(members)})

    control = subnet(network_name(run_id, "control"), "control", carve(sizes[0]), names)
    lan = subnet(network_name(run_id, "lan"), "lan", carve(sizes[1]), multicast) if multicast else None
    links = []
    for i, link in enumerate(topology.links):
        net = subnet(network_name(run_id, "link", i), "link", carve(2 ** (32 - LINK_PREFIX)), [link.a, link.b])
        links.append(LinkNet(i, link.a, link.b, link.link_class, net))
    radios = {name: subnet(network_name(run_id, "radio", k), "radio", carve(radio_sizes[name]), members)
              for k, (name, members) in enumerate(carriers.items())}  # fmt: skip
    return AddressPlan(run_id, str(block), control, lan, links, host_nodes, radios)


def _aligned_end(sizes: Iterable[int]) -> int:
    """The addresses subnets of ``sizes`` (powers of two) take carved in that order, each on a multiple of its size."""
    end = 0
    for size in sizes:
        end = -(-end // size) * size + size
    return end


def host_routes(path: str = "/proc/net/route") -> list[Net]:
    """IPv4 destinations of the host's routing table, except the default route. Never raises."""
    out: list[Net] = []
    with contextlib.suppress(OSError):
        for line in Path(path).read_text().splitlines()[1:]:
            cols = line.split()
            if len(cols) < 8:
                continue
            dest, mask = int(cols[1], 16), int(cols[7], 16)
            if mask == 0:
                continue
            addr = ipaddress.IPv4Address(int.from_bytes(dest.to_bytes(4, "little"), "big"))
            bits = bin(mask).count("1")
            with contextlib.suppress(ValueError):
                out.append(ipaddress.IPv4Network((addr, bits), strict=False))
    return out


def taken_subnets(client: docker.DockerClient) -> list[Net]:
    """Every IPv4 subnet of every Docker network, plus the host's routes."""
    out = host_routes()
    for net in client.api.networks():
        for cfg in (net.get("IPAM") or {}).get("Config") or []:
            with contextlib.suppress(ValueError, TypeError):
                parsed = ipaddress.ip_network(cfg.get("Subnet", ""), strict=False)
                if isinstance(parsed, ipaddress.IPv4Network):
                    out.append(parsed)
    return out


@contextlib.contextmanager
def network_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` while planning and creating networks (one host, many `up`s)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def create_networks(client: docker.DockerClient, plan: AddressPlan, *,
                    progress: Callable[[str, int, int], None] | None = None,
                    driver: str = "bridge") -> dict[str, str]:  # fmt: skip
    """Create every network of ``plan`` (labelled with the run id); return name -> network id.

    ``progress("networks", done, total)`` is called before the first and after each network.

    Links and the LAN segment are ``internal``; the control network is not, so the host
    reaches the admin APIs. ``driver="overlay"`` (the swarm backend) makes them attachable
    swarm-scope overlays with the same subnets. Raises DockerBackendError naming the network.
    """
    import docker.errors
    import docker.types

    ids: dict[str, str] = {}
    links = {ln.net.name: ln for ln in plan.links}
    nets = plan.networks()
    if progress is not None:
        progress("networks", 0, len(nets))
    for net in nets:
        labels = {LABEL_RUN: plan.run_id, LABEL_ROLE: net.role}
        if (ln := links.get(net.name)) is not None:
            labels = link_labels(plan.run_id, ln)
        radio = next((name for name, r in plan.radios.items() if r.name == net.name), None)
        if radio is not None:
            labels["snekbed.radio"] = radio
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=net.subnet, gateway=net.gateway)])
        try:
            extra = {"attachable": True, "scope": "swarm"} if driver == "overlay" else {}
            created = client.api.create_network(net.name, driver=driver, internal=net.role != "control",
                                                ipam=ipam, labels=labels, check_duplicate=True, **extra)
        except docker.errors.APIError as exc:
            raise DockerBackendError(f"creating network {net.name} ({net.subnet}) failed: "
                                     f"{exc.explanation or exc}") from exc
        ids[net.name] = created["Id"]
        if progress is not None:
            progress("networks", len(ids), len(nets))
    return ids


def _remove_with_retry(remove: Callable[[], None], what: str, errors: list[str]) -> bool:
    """Call ``remove`` until it works or is gone; back off between tries. Appends the last error."""
    import docker.errors

    last = ""
    for attempt in range(REMOVE_ATTEMPTS):
        try:
            remove()
            return True
        except docker.errors.NotFound:
            return True
        except docker.errors.APIError as exc:
            last = str(exc.explanation or exc)
            time.sleep(REMOVE_BACKOFF_S * 2 ** attempt)
    errors.append(f"{what}: {last}")
    return False


def remove_networks(client: docker.DockerClient, label_filter: str, errors: list[str],
                    containers: Iterable[str] = ()) -> int:
    """Remove every network matching ``label_filter`` (``snekbed.run=<id>`` or ``snekbed.run``), one at a time.

    A network the engine still believes has "active endpoints" after its containers
    are gone (a known engine bug) has those endpoints force-disconnected first: the
    ones inspection lists, and every name in ``containers`` (the run's containers,
    removed or not; the engine accepts a forced disconnect by the name of a container
    it no longer has, which is how a stale endpoint is cleared).
    Returns how many were removed; failures are appended to ``errors``.
    """
    removed = 0
    known = list(dict.fromkeys(containers))
    for net in client.api.networks(filters={"label": label_filter}):
        net_id, name = net["Id"], net.get("Name", net["Id"][:12])

        def remove(net_id: str = net_id) -> None:
            import docker.errors

            try:
                client.api.remove_network(net_id)
            except docker.errors.APIError as exc:
                if "active endpoints" not in str(exc.explanation or exc):
                    raise
                info = client.api.inspect_network(net_id)
                for endpoint in [*(info.get("Containers") or {}), *known]:
                    with contextlib.suppress(docker.errors.APIError):
                        client.api.disconnect_container_from_network(endpoint, net_id, force=True)
                raise

        if _remove_with_retry(remove, f"network {name}", errors):
            removed += 1
        elif "active endpoints" in errors[-1] and not _attached(client, net_id):
            errors[-1] += (f" (none attached: {STALE_COUNT}, a Docker 20.10 defect, moby#42119; only restarting the "
                           f"engine clears it)")
    return removed


def _attached(client: docker.DockerClient, net_id: str) -> bool:
    """Whether the engine lists any container on the network (True when it cannot say)."""
    try:
        return bool(client.api.inspect_network(net_id).get("Containers"))
    except Exception:  # gone meanwhile, or the engine is unreachable: do not claim a stale count
        return True
