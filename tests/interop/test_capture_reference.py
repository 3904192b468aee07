"""A live capture of reference nodes peered with a snekbed node, read by the Wireshark dissector
(docs/interop.md, "Golden wire tests"; docs/capture.md).

Two reference nodes (node/pinecone on the reference's router) each dial one ``snekbed node``, all on 127.0.0.1.
dumpcap records loopback with a capture filter on the snekbed node's listening port, started before the
reference nodes dial, so the capture holds both TCP connections whole and nothing else: handshakes both ways,
then every frame each implementation wrote. The pings cross the snekbed node (reference to reference) and
leave it (snekbed to reference), SNEK- and tree-routed. ``check_capture`` then decodes every connection with
tshark and snek.lua and with snekbed's codec and compares them frame by frame. Real processes, no mocks.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.tools.capture import TSHARK_ARGS, check_capture, dissector_path
from tests.ci import need
from tests.interop.refproc import RefProc
from tests.node.nodeproc import NodeProc, wait_until

pytestmark = pytest.mark.slow

TAG = "capture"
# PROTOCOL.md: bootstraps every 5 s (§6.7); three nodes need a couple of rounds for their snake, more on two
# busy cores. A keepalive follows 3 s without anything else to send (§3.5).
CONVERGE_S = 12 * 5.0
PING_TIMEOUT_S = 3.0


def _tool(name: str) -> str:
    path = shutil.which(name)
    need(path is not None, f"{name} is not installed (apt-get install -y tshark: it brings dumpcap)")
    return str(path)


class Capture:
    """dumpcap on lo for one TCP port, started and stopped by this test (by its own process id)."""

    def __init__(self, port: int, out: Path) -> None:
        self.out = out
        self.log = out.with_suffix(".log")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [_tool("dumpcap"), "-q", "-i", "lo", "-f", f"tcp port {port} and host 127.0.0.1", "-w", str(out)],
                stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)  # fmt: skip
        wait_until(lambda: "Capturing on" in self.text() or self.proc.poll() is not None, 30, what="dumpcap to start")
        assert self.proc.poll() is None, f"dumpcap could not capture on lo: {self.text()}"

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # dumpcap finishes the file and exits
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def star(reference_binary: Path, tmp_path: Path) -> Iterator[tuple[NodeProc, RefProc, RefProc, Capture]]:
    _tool("tshark")
    nodes: list[NodeProc | RefProc] = []
    cap: Capture | None = None
    try:
        s1 = NodeProc("s1", tmp_path, tag=TAG)
        nodes.append(s1)
        s1.start(timeout_s=60)
        cap = Capture(s1.listen_port, tmp_path / "live.pcapng")
        refs = []
        for name in ("r1", "r2"):
            r = RefProc(reference_binary, name, tmp_path, tag=TAG, extra=["--peer", s1.uri()])
            nodes.append(r)
            refs.append(r.start(timeout_s=60))
        yield s1, refs[0], refs[1], cap
    finally:
        if cap is not None:
            cap.stop()
        for n in nodes:
            n.close()


def test_live_reference_nodes_decode_with_the_dissector(star: tuple[NodeProc, RefProc, RefProc, Capture]) -> None:
    s1, r1, r2, cap = star
    nodes = (s1, r1, r2)
    order = sorted(nodes, key=lambda n: n.key)

    def wrong() -> list[str]:
        out = []
        for i, n in enumerate(order):
            st = n.state()
            if st["root"]["key"] != order[-1].key.hex():
                out.append(f"{n.name}: root {st['root']['key'][:8]}")
            if st["descending"] != (order[i - 1].key.hex() if i else None):
                out.append(f"{n.name}: descending {(st['descending'] or 'none')[:8]}")
        return out

    wait_until(lambda: not wrong(), CONVERGE_S, interval_s=0.5, what="a converged star")
    # pings through the snekbed node (reference to reference) and from it, SNEK then tree
    for a, b in ((r1, r2), (r2, r1), (s1, r1), (s1, r2)):
        for mode in ("snek", "tree"):
            res = a.ping(b.key, mode=mode, count=2, timeout_s=PING_TIMEOUT_S)
            assert res["received"] == 2, (a.name, b.name, mode, res)
    time.sleep(3.5)  # long enough for a keepalive on a link with nothing else to send
    cap.stop()
    for n in nodes:
        assert n.alive(), f"{n.name} died:\n{n.log_tail()}"

    result = check_capture(cap.out)
    assert result.malformed == 0 and not result.mismatches, result.to_dict()
    assert result.ok and result.connections == 4 and result.handshakes == 4, result.to_dict()
    for t in ("keepalive", "tree_announcement", "bootstrap", "traffic", "wakeup_broadcast"):
        assert result.by_type.get(t, 0) > 0, (t, result.by_type)

    tshark = _tool("tshark")
    out = subprocess.run([tshark, "-r", str(cap.out), "-X", f"lua_script:{dissector_path()}", *TSHARK_ARGS,
                          "-Y", "snek", "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,",
                          "-e", "snek.handshake.key", "-e", "snek.type", "-e", "snek.ping.type"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    keys: set[str] = set()
    n_types = 0
    pings = set()
    for line in out.splitlines():
        hk, types_, ping = (line.split("\t") + ["", ""])[:3]
        keys.update(k.replace(":", "") for k in hk.split(",") if k)
        n_types += len([t for t in types_.split(",") if t])
        pings.update(p for p in ping.split(",") if p)
    assert keys == {n.key.hex() for n in nodes}  # only our three processes, both ends of both links
    assert n_types == result.frames  # every frame's type decoded by the dissector
    assert pings == {"0", "1"}  # pings and pongs
