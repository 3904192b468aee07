"""Real ``snekbed node`` processes on 127.0.0.1 for the node tests (and the benchmark).

:class:`NodeProc` starts one node with port 0 everywhere and learns its bound
addresses from ``--ready-file``; :class:`Cluster` starts several, wires them
with ``--peer`` URIs and kills every process group in ``close()``, whatever
happened. Keys come from :func:`seed_for`, so tests know the key order.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Self

import httpx

from node.core.crypto import Identity

__all__ = ["Cluster", "NodeProc", "key_for", "seed_for", "snekbed_argv", "wait_until"]


def seed_for(name: str, tag: str = "nodetest") -> bytes:
    return hashlib.sha256(f"{tag}/{name}".encode()).digest()


def key_for(name: str, tag: str = "nodetest") -> bytes:
    return Identity(seed_for(name, tag)).public_key


def snekbed_argv() -> list[str]:
    exe = Path(sys.executable).parent / "snekbed"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "from orchestrator.cli import main; main()"]


def wait_until(pred, timeout_s: float, interval_s: float = 0.1, what: str = "condition") -> Any:
    """Poll ``pred()`` until it returns a truthy value; raise AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what} (last: {last!r})")


def holds(pred, for_s: float, interval_s: float = 0.1, what: str = "condition") -> None:
    """Check ``pred()`` throughout ``for_s`` seconds; raise AssertionError the first time it is false.

    For asserting that something does NOT happen within a window (not for synchronisation: use wait_until).
    """
    deadline = time.monotonic() + for_s
    while True:
        if not pred():
            raise AssertionError(f"{what} stopped holding")
        if time.monotonic() >= deadline:
            return
        time.sleep(interval_s)


def metric(text: str, name: str) -> float:
    """The value of an unlabelled sample ``name`` in a Prometheus text exposition (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


class NodeProc:
    """One node process. ``start()`` returns once its ready file exists."""

    #: how messages name the process (a subclass runs another program: tests/interop/refproc.py)
    label = "node"

    def __init__(self, name: str, workdir: Path, *, extra: list[str] | None = None, tag: str = "nodetest") -> None:
        self.name = name
        self.workdir = workdir
        self.seed = seed_for(name, tag)
        self.key = Identity(self.seed).public_key
        self.extra = list(extra or [])
        self.ready_path = workdir / f"{name}.ready.json"
        self.events_path = workdir / f"{name}.events.jsonl"
        self.log_path = workdir / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.info: dict[str, Any] = {}
        self._client = httpx.Client(timeout=30.0)

    def argv(self) -> list[str]:
        return [
            *snekbed_argv(), "node",
            "--listen", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
            "--key-seed", self.seed.hex(), "--name", self.name, "--run-id", "nodetest",
            "--events", str(self.events_path), "--ready-file", str(self.ready_path), *self.extra,
        ]  # fmt: skip

    def start(self, timeout_s: float = 20.0) -> NodeProc:
        self.ready_path.unlink(missing_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while not self.ready_path.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.label} {self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.label} {self.name} not ready after {timeout_s} s:\n{self.log_tail()}")
            time.sleep(0.05)
        self.info = json.loads(self.ready_path.read_text())
        return self

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "<no log>"

    @property
    def listen(self) -> str:
        return self.info["listen"]

    @property
    def listen_port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])

    def uri(self, cls: str = "remote", **params: object) -> str:
        q = "&".join([f"class={cls}", *(f"{k}={v}" for k, v in params.items())])
        return f"tcp://{self.listen}?{q}"

    @property
    def admin(self) -> str:
        return f"http://{self.info['admin']}"

    def get(self, path: str) -> Any:
        r = self._client.get(self.admin + path)
        r.raise_for_status()
        return r.json()

    def post(self, path: str, body: dict, timeout_s: float = 60.0) -> httpx.Response:
        return self._client.post(self.admin + path, json=body, timeout=timeout_s)

    def delete(self, path: str) -> httpx.Response:
        return self._client.delete(self.admin + path)

    def state(self) -> dict:
        return self.get("/state")

    def ping(self, key: bytes, mode: str = "snek", count: int = 1, timeout_s: float = 5.0) -> dict:
        r = self.post("/ping", {"key": key.hex(), "mode": mode, "count": count, "timeout_s": timeout_s})
        r.raise_for_status()
        return r.json()

    def metrics_text(self) -> str:
        r = self._client.get(f"http://{self.info['metrics']}/metrics")
        r.raise_for_status()
        return r.text

    def events(self) -> list[dict]:
        if not self.events_path.exists():
            return []
        return [json.loads(line) for line in self.events_path.read_text().splitlines() if line.strip()]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout_s: float = 15.0) -> int:
        """SIGTERM and wait; return the exit code (raises AssertionError if it hangs)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"{self.label} {self.name} ignored SIGTERM for {timeout_s} s:\n{self.log_tail()}") from None

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)

    def close(self) -> None:
        self.kill9()
        self._client.close()


class Cluster:
    """Several NodeProcs; ``close()`` kills them all (use in ``finally`` or as a context manager)."""

    def __init__(self, workdir: Path, tag: str = "nodetest") -> None:
        self.workdir = workdir
        self.tag = tag
        self.nodes: dict[str, NodeProc] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, name: str, *extra: str) -> NodeProc:
        n = NodeProc(name, self.workdir, extra=list(extra), tag=self.tag)
        self.nodes[name] = n
        return n

    def start(self, name: str, *extra: str) -> NodeProc:
        return self.add(name, *extra).start()

    def __getitem__(self, name: str) -> NodeProc:
        return self.nodes[name]

    def alive(self) -> list[NodeProc]:
        return [n for n in self.nodes.values() if n.alive()]

    def close(self) -> None:
        for n in self.nodes.values():
            n.close()
