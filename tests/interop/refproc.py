"""Reference nodes (node/pinecone, built by orchestrator.backends.reference) as real processes on 127.0.0.1.

:class:`RefProc` is :class:`nodeproc.NodeProc`'s twin for the reference node: port 0 everywhere, the bound
addresses from ``--ready-file``, the same admin helpers (its ``/metrics`` is on the admin port). Keys come from
:func:`nodeproc.seed_for`, so a test knows the key order of a mixed network.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from node.core.crypto import Identity
from tests.node.nodeproc import seed_for

__all__ = ["RefProc"]


class RefProc:
    """One reference node process. ``start()`` returns once its ready file exists."""

    def __init__(self, binary: Path, name: str, workdir: Path, *, extra: list[str] | None = None,
                 tag: str = "nodetest", run_id: str = "nodetest") -> None:
        self.binary = binary
        self.name = name
        self.workdir = workdir
        self.seed = seed_for(name, tag)
        self.key = Identity(self.seed).public_key
        self.extra = list(extra or [])
        self.run_id = run_id
        self.ready_path = workdir / f"{name}.ready.json"
        self.events_path = workdir / f"{name}.events.jsonl"
        self.log_path = workdir / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.info: dict[str, Any] = {}
        self._client = httpx.Client(timeout=30.0)

    def argv(self) -> list[str]:
        return [
            str(self.binary), "--listen", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0",
            "--key-seed", self.seed.hex(), "--name", self.name, "--run-id", self.run_id,
            "--events", str(self.events_path), "--ready-file", str(self.ready_path), *self.extra,
        ]  # fmt: skip

    def start(self, timeout_s: float = 20.0) -> RefProc:
        self.ready_path.unlink(missing_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while not self.ready_path.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"reference node {self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"reference node {self.name} not ready after {timeout_s} s:\n{self.log_tail()}")
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

    def uri(self, cls: str = "remote") -> str:
        return f"tcp://{self.listen}?class={cls}"

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
            raise AssertionError(f"reference node {self.name} ignored SIGTERM for {timeout_s} s:\n{self.log_tail()}") from None

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
