"""The engine that runs a swarm task's container: what pause, link faults and ``snekbed links check`` talk to.

A swarm's manager schedules tasks but cannot act on their containers: pausing one, connecting it to a network
or running a program in it (``docker exec``) is the job of the engine on the swarm node that runs it. Which
engine that is, for a swarm node (by hostname), in this order:

1. ``$SNEKBED_SWARM_ENGINES``: ``HOSTNAME=URL`` pairs separated by commas (``h1=ssh://me@h1,h2=tcp://10.0.0.2:2376``),
   for a swarm of real machines (docs/multi-host.md);
2. the manager's own engine, for tasks on the manager's swarm node (every task on a one-node swarm);
3. the inner host's engine, when the manager is the manager of a ``snekbed cluster`` (its hosts' engines listen on
   ``tcp://<address>:2375`` on the cluster's bridge).

Anything else is a :class:`SwarmEngineError` naming the hostname and the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import docker

from orchestrator.backends.cluster import Cluster, ClusterError, find_cluster, host_client
from orchestrator.backends.docker_net import DockerBackendError

__all__ = ["ENGINES_ENV", "SwarmEngineError", "SwarmEngines", "parse_engines"]

ENGINES_ENV = "SNEKBED_SWARM_ENGINES"


class SwarmEngineError(DockerBackendError):
    """No engine is known for a swarm node."""


def parse_engines(text: str) -> dict[str, str]:
    """``h1=URL,h2=URL`` -> {hostname: URL}. Raises SwarmEngineError naming the variable and the bad pair."""
    out: dict[str, str] = {}
    for pair in (p.strip() for p in text.split(",")):
        if not pair:
            continue
        name, sep, url = pair.partition("=")
        if not sep or not name.strip() or not urlparse(url.strip()).scheme:
            raise SwarmEngineError(f"${ENGINES_ENV}: {pair!r} is not HOSTNAME=URL (e.g. h1=ssh://me@h1)")
        out[name.strip()] = url.strip()
    return out


class SwarmEngines:
    """A client for the engine of each swarm node of the swarm ``manager`` manages (made once, kept)."""

    def __init__(self, manager: docker.DockerClient, *, engines: Mapping[str, str] | None = None) -> None:
        self.manager = manager
        self.urls = dict(engines) if engines is not None else parse_engines(os.environ.get(ENGINES_ENV, ""))
        self._clients: dict[str, Any] = {}
        self._cluster: Cluster | None = None
        self._own: str | None = None

    def own_hostname(self) -> str:
        """The hostname of the manager's own swarm node."""
        if self._own is None:
            node_id = (self.manager.api.info().get("Swarm") or {}).get("NodeID", "")
            found = [n for n in self.manager.api.nodes() if n.get("ID") == node_id]
            self._own = str((found[0].get("Description") or {}).get("Hostname", "")) if found else ""
        return self._own

    def client(self, hostname: str) -> Any:
        """The engine of swarm node ``hostname``. Raises SwarmEngineError when none is known."""
        if hostname in self._clients:
            return self._clients[hostname]
        if hostname in self.urls:
            made = docker.DockerClient(base_url=self.urls[hostname], timeout=30)
        elif hostname == self.own_hostname():
            made = self.manager
        else:
            made = host_client(self._snekbed_cluster(hostname).host(hostname))
        self._clients[hostname] = made
        return made

    def _snekbed_cluster(self, hostname: str) -> Cluster:
        if self._cluster is None:
            address = urlparse(str(self.manager.api.base_url)).hostname or ""
            try:
                self._cluster = find_cluster(manager_address=address)
            except ClusterError as exc:
                raise SwarmEngineError(f"no engine known for swarm node {hostname!r}: set ${ENGINES_ENV} "
                                       f"(HOSTNAME=URL,...) to reach it ({exc})") from None
        if hostname not in {h.name for h in self._cluster.hosts}:
            raise SwarmEngineError(f"swarm node {hostname!r} is not a host of cluster {self._cluster.id}")
        return self._cluster

    def forget(self) -> None:
        """Drop the clients made so far (a snekbed cluster's host started again may have a new address)."""
        self._clients.clear()
        self._cluster = None

    def container(self, hostname: str, container_id: str) -> Any:
        """The SDK container ``container_id`` on ``hostname``'s engine (exec, pause, attrs)."""
        return self.client(hostname).containers.get(container_id)
