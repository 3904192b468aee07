"""Reference nodes (node/pinecone, built by orchestrator.backends.reference) as real processes on 127.0.0.1.

:class:`RefProc` is :class:`nodeproc.NodeProc` running the reference node instead of ``snekbed node``: port 0
everywhere, the bound addresses from ``--ready-file``, the same admin helpers (its ``/metrics`` is on the admin
port). Keys come from :func:`nodeproc.seed_for`, so a test knows the key order of a mixed network.
"""

from __future__ import annotations

from pathlib import Path

from tests.node.nodeproc import NodeProc

__all__ = ["RefProc"]


class RefProc(NodeProc):
    """One reference node process. ``start()`` returns once its ready file exists."""

    label = "reference node"

    def __init__(self, binary: Path, name: str, workdir: Path, *, extra: list[str] | None = None,
                 tag: str = "nodetest", run_id: str = "nodetest") -> None:
        super().__init__(name, workdir, extra=extra, tag=tag)
        self.binary = binary
        self.run_id = run_id

    def argv(self) -> list[str]:
        return [
            str(self.binary), "--listen", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0",
            "--key-seed", self.seed.hex(), "--name", self.name, "--run-id", self.run_id,
            "--events", str(self.events_path), "--ready-file", str(self.ready_path), *self.extra,
        ]  # fmt: skip
