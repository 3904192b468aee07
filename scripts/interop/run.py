"""Interoperability with the Pinecone reference: snekbed nodes and reference nodes in one network.

    .venv/bin/python scripts/interop/run.py --pinecone-src DIR [--gopath DIR] [--ours 4] [--theirs 4] [--json]

Builds ``refnode`` (scripts/interop/refnode/main.go: a node on the reference's router) against a checkout of
github.com/matrix-org/pinecone (``--pinecone-src``): with ``--gopath DIR``, offline in GOPATH mode (DIR/src
holds github.com/Arceliar/phony, go.uber.org/atomic and github.com/gorilla/websocket, the router's only
dependencies, plus golang.org/x/net and golang.org/x/sys for the multicast package); without it, as a Go module (the Go module proxy must be reachable). Needs ``go`` (Debian's
golang-go is enough).

Then, on 127.0.0.1 only, it starts ``--ours`` snekbed nodes (``snekbed node``) and ``--theirs`` reference
nodes, alternating, in a circulant graph (node i peers with i+1 and i+2, so that two nodes can fail
without cutting it), and checks, in order:

1. convergence: every node names the highest key as root, and every node's descending key is the next
   lower key (snekbed's ``GET /state``, the reference's manhole);
2. snekbed's pings (``POST /ping``) to every other node, in SNEK and tree mode;
3. the reference nodes' pings (one a second to every other node, the reference simulator's convention):
   every pair answered in the last ``--window`` seconds;
4. the root killed twice (the highest and then the next highest key, whichever implementation runs them):
   re-convergence, and snekbed's pings again.

With ``--lan`` (root, ``ip netns``), LAN discovery instead: a snekbed node and a reference node in two
network namespaces joined by a veth pair, each with multicast discovery only (no configured peer), must
find each other (Appendix A of PROTOCOL.md), peer once, as a multicast link on both sides, and answer each
other's pings.

Prints a table (or one JSON object with ``--json``: ``verdict``, ``converged_s``, ``pings_ours``,
``pings_reference``, ``root_kills``; with ``--lan``: ``verdict``, ``lan``) and exits 0 when every check
passed, 1 otherwise, 2 on a setup error.
Every process it starts is stopped at the end. docs/interop.md has a measured run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))

from node.core.crypto import Identity  # noqa: E402  (the repo is on the path only from here)


class SetupError(Exception):
    pass


def build_refnode(pinecone_src: Path, gopath: Path | None, work: Path, program: str = "refnode") -> Path:
    """Build ``program`` (refnode/main.go, or refsim/main.go) against ``pinecone_src``; return the binary."""
    go = shutil.which("go")
    if go is None:
        raise SetupError("`go` is not installed (Debian: apt-get install golang-go)")
    if not (pinecone_src / "router" / "router.go").is_file():
        raise SetupError(f"{pinecone_src} is not a checkout of github.com/matrix-org/pinecone (no router/router.go)")
    out = work / program
    work = work / f"build-{program}"
    work.mkdir()
    env = {**os.environ, "GOFLAGS": "", "GOCACHE": str(work / "gocache")}
    if gopath is not None:
        tree = work / "gopath" / "src"
        (tree / "github.com" / "matrix-org").mkdir(parents=True)
        (tree / "github.com" / "matrix-org" / "pinecone").symlink_to(pinecone_src.resolve())
        (tree / f"snekbed-{program}").mkdir()
        shutil.copy(HERE / program / "main.go", tree / f"snekbed-{program}" / "main.go")
        env.update(GO111MODULE="off", GOPATH=f"{tree.parent}{os.pathsep}{gopath.resolve()}")
        cmds, cwd = [[go, "build", "-o", str(out), "."]], tree / f"snekbed-{program}"
    else:
        mod = work / "module"
        mod.mkdir()
        shutil.copy(HERE / program / "main.go", mod / "main.go")
        (mod / "go.mod").write_text(f"module snekbed-{program}\n\ngo 1.18\n\nrequire github.com/matrix-org/pinecone v0.0.0\n\n"
                                    f"replace github.com/matrix-org/pinecone => {pinecone_src.resolve()}\n")
        cmds, cwd = [[go, "mod", "tidy"], [go, "build", "-o", str(out), "."]], mod
    for cmd in cmds:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise SetupError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


@dataclass
class Node:
    name: str
    ours: bool
    seed: str
    key: str
    port: int
    admin: int = 0  # ours: the admin API's port
    proc: subprocess.Popen | None = None
    manhole: str = ""  # theirs: HOST:PORT of the manhole
    lines: list[str] = field(default_factory=list)  # theirs: what refnode printed

    def state(self) -> tuple[str | None, str | None]:
        """(root key, descending key) as the node itself says."""
        if self.ours:
            s = _get(f"http://127.0.0.1:{self.admin}/state")
            return (s["root"] or {}).get("key"), s.get("descending")
        s = _get(f"http://{self.manhole}/")
        desc = (s.get("snek") or {}).get("descending")
        return (s.get("root") or {}).get("root_public_key"), desc.get("public_key") if isinstance(desc, dict) else None


class Network:
    def __init__(self, refnode: Path, n_ours: int, n_theirs: int, logs: Path) -> None:
        self.refnode, self.logs = refnode, logs
        names = []
        for i in range(max(n_ours, n_theirs)):
            names += [f"ours{i + 1}"] if i < n_ours else []
            names += [f"ref{i + 1}"] if i < n_theirs else []
        self.nodes: list[Node] = []
        for name in names:
            seed = hashlib.sha256(f"snekbed-interop-{name}".encode()).hexdigest()
            key = Identity(bytes.fromhex(seed)).public_key.hex()  # ed25519 from a seed: the same in Go
            self.nodes.append(Node(name, name.startswith("ours"), seed, key, _free_port()))
        n = len(self.nodes)
        self.edges = sorted({tuple(sorted((i, (i + d) % n))) for i in range(n) for d in (1, 2) if n > d})
        self.alive = list(self.nodes)

    def name_of(self, key: str | None) -> str:
        return next((x.name for x in self.nodes if x.key == key), "none" if key is None else key[:8])

    def start(self) -> None:
        everyone = [x.key for x in self.nodes]
        for i, node in enumerate(self.nodes):
            dial = [self.nodes[a] for a, b in self.edges if b == i] + [self.nodes[b] for a, b in self.edges if a == i and b < i]
            log = open(self.logs / f"{node.name}.log", "w")
            if node.ours:
                node.admin = _free_port()
                cmd = [str(REPO / ".venv" / "bin" / "snekbed"), "node", "--listen", f"127.0.0.1:{node.port}",
                       "--key-seed", node.seed, "--admin", f"127.0.0.1:{node.admin}", "--metrics", "off",
                       "--name", node.name, "--events", str(self.logs / f"{node.name}.events.jsonl")]
                for peer in dial:
                    cmd += ["--peer", f"tcp://127.0.0.1:{peer.port}"]
                node.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            else:
                cmd = [str(self.refnode), "-listen", f"127.0.0.1:{node.port}", "-seed", node.seed,
                       "-connect", ",".join(f"127.0.0.1:{p.port}" for p in dial),
                       "-ping", ",".join(k for k in everyone if k != node.key)]
                node.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
                assert node.proc.stdout is not None
                head = [node.proc.stdout.readline().split() for _ in range(3)]
                if [h[0] for h in head if h] != ["KEY", "LISTEN", "MANHOLE"] or head[0][1] != node.key:
                    raise SetupError(f"refnode {node.name} did not start as expected: {head}")
                node.manhole = head[2][1]
                threading.Thread(target=lambda n=node: n.lines.extend(n.proc.stdout), daemon=True).start()
        for node in self.nodes:
            if node.ours:
                for _ in range(150):
                    try:
                        _get(f"http://127.0.0.1:{node.admin}/healthz")
                        break
                    except OSError:
                        time.sleep(0.2)
                else:
                    raise SetupError(f"{node.name} did not answer on its admin API")

    def converge(self, within_s: float) -> tuple[float | None, str]:
        """Seconds until every live node names the highest key as root and the snake is ordered (None: not
        within ``within_s``), and what was wrong at the last reading."""
        order = sorted(self.alive, key=lambda x: x.key)
        t0, detail = time.monotonic(), ""
        while time.monotonic() - t0 < within_s:
            try:
                states = {x.name: x.state() for x in self.alive}
            except OSError as exc:
                detail = f"state not readable: {exc}"
            else:
                wrong = [f"{x.name}: root {self.name_of(states[x.name][0])}" for x in order
                         if states[x.name][0] != order[-1].key]
                wrong += [f"{x.name}: descending {self.name_of(states[x.name][1])}, expected "
                          f"{self.name_of(order[i - 1].key if i else None)}"
                          for i, x in enumerate(order) if states[x.name][1] != (order[i - 1].key if i else None)]
                if not wrong:
                    return round(time.monotonic() - t0, 1), ""
                detail = "; ".join(wrong)
            time.sleep(0.5)
        return None, detail

    def our_pings(self) -> dict:
        sent = answered = 0
        lost = []
        for a in [x for x in self.alive if x.ours]:
            for b in self.alive:
                if a is b:
                    continue
                for mode in ("snek", "tree"):
                    r = _post(f"http://127.0.0.1:{a.admin}/ping", {"key": b.key, "mode": mode, "count": 2,
                                                                    "timeout_s": 3})  # fmt: skip
                    sent += r["sent"]
                    answered += r["received"]
                    if r["received"] < r["sent"]:
                        lost.append(f"{a.name}->{b.name} ({mode})")
        return {"sent": sent, "answered": answered, "lost": lost}

    def reference_pings(self, since: float) -> dict:
        """Per reference node and target: answered at least once after ``since`` (refnode's clock)."""
        pairs, answered, missing = 0, 0, []
        for a in [x for x in self.alive if not x.ours]:
            got = {line.split()[1] for line in list(a.lines)
                   if line.startswith("PONG") and float(line.split()[3][2:]) >= since}
            for b in self.alive:
                if b is not a:
                    pairs += 1
                    answered += b.key in got
                    if b.key not in got:
                        missing.append(f"{a.name}->{b.name}")
        return {"pairs": pairs, "answered": answered, "missing": missing}

    def kill(self, node: Node) -> None:
        assert node.proc is not None
        node.proc.kill()
        node.proc.wait(10)
        self.alive.remove(node)

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(10)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait()


def run(net: Network, window_s: float, within_s: float) -> dict:
    started = time.monotonic()
    net.start()
    out: dict = {"nodes": {x.name: {"key": x.key, "implementation": "snekbed" if x.ours else "reference"}
                           for x in net.nodes}, "links": [[net.nodes[a].name, net.nodes[b].name] for a, b in net.edges]}
    conv, detail = net.converge(within_s)
    out["converged_s"], out["not_converged"] = conv, detail or None
    out["pings_ours"] = net.our_pings()
    time.sleep(window_s)  # the reference nodes ping every node once a second
    out["pings_reference"] = net.reference_pings(time.monotonic() - started - window_s)
    out["root_kills"] = []
    for _ in range(2):
        root = max(net.alive, key=lambda x: x.key)
        net.kill(root)
        conv, detail = net.converge(within_s)
        out["root_kills"].append({"killed": root.name, "implementation": "snekbed" if root.ours else "reference",
                                  "new_root": max(net.alive, key=lambda x: x.key).name, "converged_s": conv,
                                  "not_converged": detail or None, "pings_ours": net.our_pings()})  # fmt: skip
    ok = out["converged_s"] is not None and not out["pings_ours"]["lost"] and not out["pings_reference"]["missing"]
    ok = ok and all(k["converged_s"] is not None and not k["pings_ours"]["lost"] for k in out["root_kills"])
    out["verdict"] = "pass" if ok else "fail"
    return out


def _sh(*cmd: str) -> None:
    proc = subprocess.run(list(cmd), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SetupError(f"{' '.join(cmd)}: {proc.stderr.strip()}")


def _in_ns(ns: str, *cmd: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd]


def lan_check(refnode: Path, logs: Path, wait_s: float) -> dict:
    """A snekbed node and a reference node, multicast discovery only, on two ends of a veth pair."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise SetupError("--lan needs root and iproute2 (network namespaces)")
    tag = f"sbi{os.getpid() % 100000}"
    ns_ours, ns_ref = f"{tag}-ours", f"{tag}-ref"
    procs: list[subprocess.Popen] = []
    made: list[str] = []
    try:
        for ns in (ns_ours, ns_ref):
            _sh("ip", "netns", "add", ns)
            made.append(ns)
        _sh("ip", "link", "add", f"{tag}a", "type", "veth", "peer", "name", f"{tag}b")
        for ns, dev, addr in ((ns_ours, f"{tag}a", "10.213.0.1/24"), (ns_ref, f"{tag}b", "10.213.0.2/24")):
            _sh("ip", "link", "set", dev, "netns", ns)
            _sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            _sh("ip", "-n", ns, "link", "set", dev, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        seed = hashlib.sha256(b"snekbed-interop-lan-ours").hexdigest()
        ours_key = Identity(bytes.fromhex(seed)).public_key.hex()
        procs.append(subprocess.Popen(_in_ns(ns_ours, str(REPO / ".venv" / "bin" / "snekbed"), "node", "--listen",
                                             "0.0.0.0:7000", "--multicast", f"{tag}a", "--admin", "127.0.0.1:8080",
                                             "--metrics", "off", "--key-seed", seed, "--name", "ours"),
                                      stdout=open(logs / "lan-ours.log", "w"), stderr=subprocess.STDOUT))  # fmt: skip
        ref = subprocess.Popen(_in_ns(ns_ref, str(refnode), "-multicast", "-listen", "127.0.0.1:0", "-manhole",
                                      "127.0.0.1:7777", "-ping", ours_key),
                               stdout=subprocess.PIPE, stderr=open(logs / "lan-ref.log", "w"), text=True)  # fmt: skip
        procs.append(ref)
        assert ref.stdout is not None
        ref_key = ref.stdout.readline().split()[1]
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(ref.stdout), daemon=True).start()
        time.sleep(wait_s)

        def curl(ns: str, *args: str) -> dict:
            proc = subprocess.run(_in_ns(ns, "curl", "-s", "--max-time", "20", *args), capture_output=True, text=True)
            if proc.returncode != 0:
                raise SetupError(f"curl in {ns} failed: {proc.stderr.strip()}")
            return json.loads(proc.stdout)

        state = curl(ns_ours, "http://127.0.0.1:8080/state")
        ping = curl(ns_ours, "-XPOST", "http://127.0.0.1:8080/ping", "-H", "content-type: application/json", "-d",
                    json.dumps({"key": ref_key, "mode": "snek", "count": 3, "timeout_s": 3}))  # fmt: skip
        manhole = curl(ns_ref, "http://127.0.0.1:7777/")
        ours_peers = [(p["key"], p["class"]) for p in state["peers"]]
        ref_peers = [(k, p.get("type")) for k, ps in manhole["peers"].items() for p in ps if p.get("port")]
        pongs = [line for line in list(lines) if line.startswith("PONG") and line.split()[1] == ours_key]
        out = {"ours_peers": ours_peers, "reference_peers": ref_peers, "pings_ours": ping,
               "pongs_reference": len(pongs), "seconds": wait_s}
        ok = ours_peers == [(ref_key, "multicast")] and [k for k, _ in ref_peers] == [ours_key]
        ok = ok and ping["received"] == ping["sent"] and len(pongs) >= wait_s / 2
        return {"lan": out, "verdict": "pass" if ok else "fail"}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # the veth pair goes with them


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pinecone-src", type=Path, required=True, help="a checkout of github.com/matrix-org/pinecone")
    p.add_argument("--gopath", type=Path, help="offline build: a GOPATH whose src/ holds the router's dependencies")
    p.add_argument("--ours", type=int, default=4, help="snekbed nodes")
    p.add_argument("--theirs", type=int, default=4, help="reference nodes")
    p.add_argument("--window", type=float, default=20.0, help="seconds of reference pings that must all be answered")
    p.add_argument("--within", type=float, default=60.0, help="seconds allowed for each convergence")
    p.add_argument("--keep-logs", type=Path, help="write the nodes' logs here (default: a temporary directory)")
    p.add_argument("--lan", action="store_true",
                   help="LAN discovery instead: one node of each, multicast only, two namespaces (root)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    a = p.parse_args(argv)
    if a.ours < 1 or a.theirs < 1 or a.ours + a.theirs < 4:
        p.error("--ours and --theirs must be at least 1, and at least 4 nodes in all (two root kills)")
    with tempfile.TemporaryDirectory(prefix="snekbed-interop-") as tmp:
        work = Path(tmp)
        logs = a.keep_logs or work / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        try:
            refnode = build_refnode(a.pinecone_src, a.gopath, work)
            if a.lan:
                out = lan_check(refnode, logs, a.window)
            else:
                net = Network(refnode, a.ours, a.theirs, logs)
                try:
                    out = run(net, a.window, a.within)
                finally:
                    net.stop()
        except SetupError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if a.json:
        print(json.dumps(out, indent=1))
    elif a.lan:
        lan = out["lan"]
        print(f"snekbed node's peers: {lan['ours_peers']}")
        print(f"reference node's peers (key, peer type): {lan['reference_peers']}")
        print(f"snekbed pings: {lan['pings_ours']['received']}/{lan['pings_ours']['sent']}; reference pings answered "
              f"in {lan['seconds']:g} s: {lan['pongs_reference']}")
        print(f"verdict: {out['verdict']}")
    else:
        po, pr = out["pings_ours"], out["pings_reference"]
        nodes = ", ".join(f"{n} ({v['implementation']})" for n, v in out["nodes"].items())
        print(f"nodes: {nodes}")
        print(f"converged: {out['converged_s']} s{'' if out['converged_s'] is not None else ': ' + out['not_converged']}")
        print(f"snekbed pings (snek and tree): {po['answered']}/{po['sent']} answered {po['lost'] or ''}")
        print(f"reference pings, last {a.window:g} s: {pr['answered']}/{pr['pairs']} pairs answered {pr['missing'] or ''}")
        for k in out["root_kills"]:
            q = k["pings_ours"]
            print(f"root {k['killed']} ({k['implementation']}) killed: {k['new_root']} root, converged in "
                  f"{k['converged_s']} s; snekbed pings {q['answered']}/{q['sent']} {q['lost'] or ''}")
        print(f"verdict: {out['verdict']}")
    return 0 if out["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
