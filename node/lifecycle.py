"""A node's life: start listeners, servers, dialers and timers; run until asked to stop; stop cleanly.

:class:`NodeProcess` is one nursery tree (STYLE.md §3). :meth:`NodeProcess.run`
starts, in order: the dialers of ``--peer`` (their peers wait for
``node_started``), the TCP listener (``--listen``), the Bluetooth listener
(``--listen-bluetooth``), the admin API, the metrics
server, multicast discovery, the node's timers;
then logs ``node_started``, writes the ready file and reports the bound
addresses. :meth:`NodeProcess.request_stop` begins the shutdown: every peer is
closed (reason ``node_stopping``), the final ``frame_stats`` /
``frame_dropped`` / ``node_stopping`` events are written, the HTTP servers
are told to finish, and :meth:`~NodeProcess.run` returns.
"""

from __future__ import annotations

import json
import logging
import os
import random
from pathlib import Path
from typing import Any

import trio

from node import admin, metrics
from node.config import NodeConfig
from node.peering import Connect
from node.runtime import Node
from node.transports import bluetooth as bt
from node.transports import tcp
from node.transports.multicast import MulticastDiscovery

__all__ = ["NodeProcess"]

log = logging.getLogger("snekbed.node")


class NodeProcess:
    """One node and everything it serves. Construct inside ``trio.run``."""

    def __init__(
        self, cfg: NodeConfig, *, connect: Connect = tcp.connect, rng: random.Random | None = None,
        bluetooth: bt.SeqpacketFamily = bt.L2CAP,
    ) -> None:  # fmt: skip
        self.cfg = cfg
        self.bluetooth = bluetooth
        self.node = Node(cfg, connect=connect, rng=rng, bluetooth=bluetooth)
        self.stop_reason = ""
        self._stop = trio.Event()
        self._servers_stop = trio.Event()
        self.info: dict[str, Any] = {"public_key": self.node.key.hex(), "pid": os.getpid()}

    @property
    def stopping(self) -> bool:
        """True once a stop was requested."""
        return self.node.stopping or self._stop.is_set()

    async def run(self, *, task_status: trio.TaskStatus[dict[str, Any]] = trio.TASK_STATUS_IGNORED) -> None:
        """Start listeners, servers, dialers and timers; return after a clean stop.

        Raises OSError when an address cannot be bound (before anything else starts).
        """
        cfg, node = self.cfg, self.node
        info = self.info
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(node.peering.run, cfg.peers)  # first: admin's POST /peers needs it
                listen: list[str] = []
                if cfg.listen is not None:
                    listeners = await nursery.start(tcp.serve, self._accept, cfg.listen.host, cfg.listen.port)
                    listen = [tcp.local_address(li) for li in listeners]
                    info["listen"] = listen[0]
                    info["listen_all"] = list(listen)
                if cfg.listen_bluetooth is not None:
                    lb = cfg.listen_bluetooth
                    info["listen_bluetooth"] = await nursery.start(
                        bt.serve, self.bluetooth, self._accept_bluetooth, lb.address, lb.psm
                    )
                    listen.append(info["listen_bluetooth"])
                if cfg.admin is not None:
                    info["admin"] = await nursery.start(admin.serve, node, cfg.admin, self._servers_stop.wait)
                if cfg.metrics is not None:
                    info["metrics"] = await nursery.start(metrics.serve, node.metrics, cfg.metrics, self._servers_stop.wait)
                if cfg.multicast:
                    mc = MulticastDiscovery(
                        node.key, cfg.multicast, connected_keys=node.connected_keys,
                        accept=node.peering.accept, dial=node.peering.dial_once,
                    )  # fmt: skip
                    info["multicast_listen"] = await nursery.start(mc.run)
                    listen.append(info["multicast_listen"])
                nursery.start_soon(node.run_timers)  # no checkpoint until node_started is logged
                node.events.emit("node_started", listen=listen, variant=str(node.cfg.variant), version=node.version)
                node.set_started()
                self._write_ready_file()
                log.info("node %s up: %s", node.key.hex()[:16], json.dumps(info))
                task_status.started(info)
                await self._stop.wait()
                self._shutdown()
                self._servers_stop.set()
                with trio.move_on_after(2):
                    await trio.sleep(0.05)  # let the HTTP servers see the trigger
                nursery.cancel_scope.cancel()
        finally:
            node.events.close()

    def request_stop(self, reason: str = "requested") -> None:
        """Begin a clean shutdown (idempotent); :meth:`run` returns when it is done."""
        if not self._stop.is_set():
            self.stop_reason = reason
            self._stop.set()

    def _shutdown(self) -> None:
        node = self.node
        node.stop_peers("node_stopping")
        node.emit_stats()
        node.events.emit("node_stopping", reason=self.stop_reason or "requested")
        node.events.close()

    async def _accept(self, stream: trio.SocketStream) -> None:
        host, port = tcp.remote_address(stream)
        await self.node.peering.accept(stream, f"tcp://{host}:{port}", self.cfg.inbound_link(host))

    async def _accept_bluetooth(self, stream: bt.SeqpacketStream) -> None:
        lb = self.cfg.listen_bluetooth
        assert lb is not None
        await self.node.peering.accept(stream, bt.remote_name(self.bluetooth, stream), lb.link)

    def _write_ready_file(self) -> None:
        path = self.cfg.ready_file
        if path is None:
            return
        tmp = Path(f"{path}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.info))
        os.replace(tmp, path)
