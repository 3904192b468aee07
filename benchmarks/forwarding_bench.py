"""Forwarding benchmark: frames per second delivered A -> B -> C over loopback TCP.

Three ``snekbed node`` processes in a line (B dials A, C dials B). A sends
SNEK-routed traffic to C's key in a closed loop (``POST /traffic``: at most
``--inflight`` frames unacknowledged; C acknowledges every 16 frames, so B also
forwards one small ack per 16 frames back to A). B's CPU time comes from
``/proc/<pid>/stat`` (user + system) and its forwarded frame count from its
``snek_sent_frames_total{type="traffic"}``, so "CPU per forwarded frame" counts
the acks B forwards too.

    .venv/bin/python benchmarks/forwarding_bench.py            # 64 B and 1200 B payloads
    .venv/bin/python benchmarks/forwarding_bench.py --count 200000 --sizes 64 --json out.json
    .venv/bin/python benchmarks/forwarding_bench.py --compare-recorder --sizes 64 --count 30000 --rounds 3

``--compare-recorder`` measures what the flight recorder costs (docs/node.md, "Flight recorder"): two lines of
nodes, one with ``--recorder-s 0`` and one with the recorder on (the default), loaded in turn, and a table of
the medians with their ratio on/off (the target: B's CPU per forwarded frame at most 5 % higher).

The bar (the Go reference, measured on the same kind of machine): A, B and C in
one process, 64 frames in flight, 8 000 frames/s delivered on one core and
13 000 on two; with three processes B spent about 97 us of CPU per forwarded frame.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

GO_FRAMES_PER_S_ONE_CORE = 8_000
GO_FRAMES_PER_S_TWO_CORES = 13_000
GO_B_CPU_US_PER_FRAME = 97.0
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (fields 14 and 15 of /proc/<pid>/stat)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S


class Proc:
    def __init__(self, name: str, workdir: Path, extra: list[str]) -> None:
        self.name = name
        self.seed = hashlib.sha256(f"forwarding-bench/{name}".encode()).hexdigest()
        self.ready = workdir / f"{name}.json"
        exe = Path(sys.executable).parent / "snekbed"
        argv = [str(exe)] if exe.exists() else [sys.executable, "-c", "from orchestrator.cli import main; main()"]
        argv += ["node", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
                 "--key-seed", self.seed, "--name", name, "--ready-file", str(self.ready),
                 "--no-broadcasts", "--log-level", "warning", *extra]  # fmt: skip
        self.log = open(workdir / f"{name}.log", "wb")  # noqa: SIM115
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while not self.ready.exists():
            if self.p.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"node {name} failed to start; see {workdir / (name + '.log')}")
            time.sleep(0.05)
        self.info = json.loads(self.ready.read_text())
        self.http = httpx.Client(base_url=f"http://{self.info['admin']}", timeout=600)

    @property
    def key(self) -> str:
        return self.info["public_key"]

    def metric(self, name: str, **labels: str) -> float:
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(f"http://{self.info['metrics']}/metrics").text
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return s.value
        return 0.0

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self.log.close()


class Line:
    """A -> B -> C: three node processes in a line (B dials A, C dials B), each started with ``extra`` options;
    ``tag`` keeps the names (and so the keys) of two lines apart."""

    def __init__(self, work: Path, extra: list[str], tag: str = "") -> None:
        self.a = Proc(f"A{tag}", work, extra)
        self.b = Proc(f"B{tag}", work, [*extra, "--peer", f"tcp://{self.a.info['listen']}"])
        self.c = Proc(f"C{tag}", work, [*extra, "--peer", f"tcp://{self.b.info['listen']}"])
        self.procs = (self.a, self.b, self.c)

    def pin(self) -> None:
        """B alone on core 1, A and C share core 0."""
        if os.cpu_count() and os.cpu_count() >= 2:
            os.sched_setaffinity(self.a.p.pid, {0})
            os.sched_setaffinity(self.c.p.pid, {0})
            os.sched_setaffinity(self.b.p.pid, {1})

    def wait_reachable(self) -> None:
        deadline = time.monotonic() + 30
        while self.a.http.post("/ping", json={"key": self.c.key, "count": 1, "timeout_s": 2}).json()["received"] != 1:
            if time.monotonic() > deadline:
                raise SystemExit("A cannot reach C")

    def measure(self, size: int, count: int, inflight: int, warm_up: int = 5000) -> dict:
        """One closed-loop load of ``count`` frames of ``size`` payload bytes, A to C, after a warm-up."""
        a, b, c = self.procs
        body = {"key": c.key, "payload_bytes": size, "inflight": inflight, "timeout_s": 600}
        if warm_up:
            a.http.post("/traffic", json={**body, "count": min(warm_up, count)})
        fwd0 = b.metric("snek_sent_frames_total", type="traffic")
        cpu0 = {p.name[0]: cpu_s(p.p.pid) for p in self.procs}
        res = a.http.post("/traffic", json={**body, "count": count}).json()
        cpu1 = {p.name[0]: cpu_s(p.p.pid) for p in self.procs}
        forwarded = b.metric("snek_sent_frames_total", type="traffic") - fwd0
        b_cpu = cpu1["B"] - cpu0["B"]
        return {
            "payload_bytes": size,
            "sent": res["sent"],
            "delivered": res["delivered"],
            "lost": res["lost"],
            "elapsed_s": res["elapsed_s"],
            "frames_per_s": res["frames_per_s"],
            "b_forwarded": int(forwarded),
            "b_cpu_s": round(b_cpu, 3),
            "b_cpu_us_per_frame": round(b_cpu / forwarded * 1e6, 1) if forwarded else None,
            "a_cpu_us_per_frame": round((cpu1["A"] - cpu0["A"]) / max(res["delivered"], 1) * 1e6, 1),
            "c_cpu_us_per_frame": round((cpu1["C"] - cpu0["C"]) / max(res["delivered"], 1) * 1e6, 1),
            "b_cpu_share": round(b_cpu / res["elapsed_s"], 2) if res["elapsed_s"] else None,
        }

    def stop(self) -> None:
        for p in self.procs:
            p.stop()


def run(sizes: list[int], count: int, inflight: int, pin: bool) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="snek-bench-") as tmp:
        line = Line(Path(tmp), [])
        try:
            if pin:
                line.pin()
            line.wait_reachable()
            return [line.measure(size, count, inflight) for size in sizes]
        finally:
            line.stop()


#: the flight recorder's two settings compared (``snekbed node --recorder-s``; on is the node's default)
RECORDER_MODES = {"off": ["--recorder-s", "0"], "on": []}


def compare_recorder(size: int, count: int, inflight: int, rounds: int, pin: bool) -> dict[str, list[dict]]:
    """The flight recorder off and on, side by side in one run: two lines of nodes, started together, loaded one at a
    time, off then on, ``rounds`` times (so a busy machine weighs on both alike). The rows of each mode."""
    rows: dict[str, list[dict]] = {mode: [] for mode in RECORDER_MODES}
    with tempfile.TemporaryDirectory(prefix="snek-bench-") as tmp:
        lines = {mode: Line(Path(tmp), extra, tag=mode) for mode, extra in RECORDER_MODES.items()}
        try:
            for line in lines.values():
                if pin:
                    line.pin()
                line.wait_reachable()
                line.measure(size, min(5000, count), inflight, warm_up=0)  # warm-up
            for _ in range(rounds):
                for mode, line in lines.items():
                    rows[mode].append(line.measure(size, count, inflight, warm_up=0))
        finally:
            for line in lines.values():
                line.stop()
    return rows


def print_recorder_table(rows: dict[str, list[dict]], size: int, count: int, inflight: int) -> None:
    """Medians per mode, and on/off: frames/s (above 1.00: on is faster) and CPU per frame (above 1.00: on costs)."""
    med = {m: {k: statistics.median(r[k] for r in rs) for k in ("frames_per_s", "b_cpu_us_per_frame",
                                                                 "a_cpu_us_per_frame", "c_cpu_us_per_frame")}
           for m, rs in rows.items()}  # fmt: skip
    n = len(rows["off"])
    print(f"\nflight recorder off vs on: A -> B -> C over loopback TCP, {size} B payload, {inflight} in flight, "
          f"{n} alternating rounds of {count} frames, medians, {os.cpu_count()} cores")
    print(f"{'recorder':>9} {'frames/s':>9} {'B us/fwd':>9} {'A us/fr':>8} {'C us/fr':>8} {'lost':>6}")
    for m in ("off", "on"):
        lost = sum(r["lost"] for r in rows[m])
        print(f"{m:>9} {med[m]['frames_per_s']:>9.0f} {med[m]['b_cpu_us_per_frame']:>9.1f} "
              f"{med[m]['a_cpu_us_per_frame']:>8.1f} {med[m]['c_cpu_us_per_frame']:>8.1f} {lost:>6}")
    ratio = {k: med["on"][k] / med["off"][k] for k in med["on"]}
    print(f"{'on/off':>9} {ratio['frames_per_s']:>8.3f}x {ratio['b_cpu_us_per_frame']:>8.3f}x "
          f"{ratio['a_cpu_us_per_frame']:>7.3f}x {ratio['c_cpu_us_per_frame']:>7.3f}x")
    print("(frames/s on/off below 1.00 and us/frame on/off above 1.00 are what the recorder costs; the target is 5 %: "
          "B us/fwd at most 1.05x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="64,1200", help="payload sizes in bytes, comma separated")
    ap.add_argument("--count", type=int, default=100_000, help="frames per size")
    ap.add_argument("--inflight", type=int, default=64)
    ap.add_argument("--pin", action="store_true", help="pin B to CPU 1 and A, C to CPU 0")
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    ap.add_argument("--compare-recorder", action="store_true",
                    help="compare the flight recorder off and on instead (the first of --sizes; --rounds rounds)")
    ap.add_argument("--rounds", type=int, default=3, help="with --compare-recorder: alternating rounds per mode")
    args = ap.parse_args()
    if args.compare_recorder:
        size = int(args.sizes.split(",")[0])
        compared = compare_recorder(size, args.count, args.inflight, args.rounds, args.pin)
        print_recorder_table(compared, size, args.count, args.inflight)
        if args.json:
            Path(args.json).write_text(json.dumps(compared, indent=2))
        return
    rows = run([int(s) for s in args.sizes.split(",")], args.count, args.inflight, args.pin)
    print(f"\nA -> B -> C over loopback TCP, {args.inflight} in flight, {args.count} frames per size, {os.cpu_count()} cores")
    print(f"{'payload':>8} {'frames/s':>9} {'vs Go 1c':>8} {'vs Go 2c':>8} {'B us/fwd':>9} {'vs 97us':>8} "
          f"{'A us/fr':>8} {'C us/fr':>8} {'B busy':>7} {'lost':>6}")  # fmt: skip
    for r in rows:
        us = r["b_cpu_us_per_frame"]
        print(
            f"{r['payload_bytes']:>7}B {r['frames_per_s']:>9.0f} {r['frames_per_s'] / GO_FRAMES_PER_S_ONE_CORE:>7.2f}x "
            f"{r['frames_per_s'] / GO_FRAMES_PER_S_TWO_CORES:>7.2f}x {us:>9.1f} {GO_B_CPU_US_PER_FRAME / us:>7.2f}x "
            f"{r['a_cpu_us_per_frame']:>8.1f} {r['c_cpu_us_per_frame']:>8.1f} {r['b_cpu_share']:>7.2f} {r['lost']:>6}"
        )
    print("(x = ratio to the Go reference; above 1.00 is better. 'B busy' = B's CPU seconds per wall second.)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
