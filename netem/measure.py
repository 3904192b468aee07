"""Measurements inside running containers: one-way loss, a bounded TCP transfer, RTT through the node.

Each measurement is a small stdlib-only Python program run INSIDE the containers with
``docker exec`` (Docker SDK ``container.exec_run``), so it needs nothing from the
image but ``python3``, and its traffic only flows between the two containers of a link,
on the link's addresses. The receiving and sending halves run concurrently (two
threads, each a blocking exec); every program enforces its own deadline with
``signal.alarm`` and prints one JSON object.

* :func:`udp_loss`: N numbered UDP probes per direction, paced well under the link
  rate so the rate limiter's queue never drops; the RECEIVER counts distinct sequence
  numbers (loss is applied on the receiver's INPUT on ``kernel-partial``). Both
  directions at once. A ``H``/``R`` handshake (retried) makes sure the receiver is
  bound before the probes start.
* :func:`tcp_throughput`: a bounded TCP transfer. Goodput is timed at the receiver
  (first to last payload byte). The link rate is goodput times the sender's measured
  wire overhead: the bytes its interface transmitted (``/sys/class/net/<dev>/statistics/
  tx_bytes``: Ethernet/IP/TCP headers and retransmissions, which the rate limiter also
  counts) per payload byte. :func:`best_throughput` repeats a transfer that read low
  (up to 3 times): a limiter only caps, so a low reading is a stall, not the link.
* :func:`node_rtt`: ``POST /ping`` on the node's admin API (from inside the
  container, to ``127.0.0.1``) towards the link neighbour's key: the RTT through the
  node's own transport, which is where ``kernel-partial`` adds the delay (plain ICMP
  would not see it).
"""

from __future__ import annotations

import json
import math
import random
import statistics
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from netem.errors import NetemError

__all__ = [
    "LossResult",
    "MeasureError",
    "RttResult",
    "ThroughputResult",
    "exec_python",
    "node_rtt",
    "tcp_throughput",
    "best_throughput",
    "udp_loss",
]

_HEADER = r"""
import json, os, signal, socket, struct, sys, time
A = json.loads(sys.argv[1])
signal.alarm(int(A["deadline_s"]) + 1)
def done(obj):
    print(json.dumps(obj), flush=True)
    sys.exit(0)
"""

UDP_RECEIVER = _HEADER + r"""
count = A["count"]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind((A["ip"], A["port"]))
seen = bytearray(count)
got = dup = 0
ended = False
s.settimeout(A["deadline_s"])
while True:
    try:
        data, addr = s.recvfrom(4096)
    except socket.timeout:
        break
    kind = data[:1]
    if kind == b"H":
        s.sendto(b"R", addr)
    elif kind == b"D" and len(data) >= 5:
        seq = int.from_bytes(data[1:5], "big")
        if seq < count:
            if seen[seq]:
                dup += 1
            else:
                seen[seq] = 1
                got += 1
        s.settimeout(A["idle_s"])
    elif kind == b"E":
        ended = True
        break
done({"received": got, "duplicates": dup, "ended": ended})
"""

UDP_SENDER = _HEADER + r"""
count, pps = A["count"], A["pps"]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((A["ip"], 0))
dst = (A["peer_ip"], A["port"])
s.settimeout(0.1)
t_end = time.monotonic() + A["deadline_s"] - 2
while True:
    s.sendto(b"H", dst)
    try:
        if s.recv(16) == b"R":
            break
    except (socket.timeout, ConnectionRefusedError):
        pass
    if time.monotonic() > t_end:
        done({"error": "the receiver never answered the handshake", "sent": 0})
s.settimeout(None)
pad = b"x" * max(0, A["payload_bytes"] - 5)
sent = errors = 0
t0 = time.monotonic()
for seq in range(count):
    wait = t0 + seq / pps - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    elif wait < -0.02:  # descheduled: never catch up in a burst the rate limiter's queue would drop
        t0 -= wait + 0.02
    try:
        s.sendto(b"D" + seq.to_bytes(4, "big") + pad, dst)
        sent += 1
    except OSError:
        errors += 1
elapsed = time.monotonic() - t0
time.sleep(0.3)
for _ in range(30):
    s.sendto(b"E", dst)
    time.sleep(0.01)
done({"sent": sent, "send_errors": errors, "elapsed_s": elapsed})
"""

TCP_RECEIVER = _HEADER + r"""
ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((A["ip"], A["port"]))
ls.listen(1)
ls.settimeout(A["deadline_s"])
c, _ = ls.accept()
c.settimeout(A["deadline_s"])
head = b""
while len(head) < 8:
    chunk = c.recv(8 - len(head))
    if not chunk:
        done({"error": "connection closed before the header"})
    head += chunk
n = struct.unpack(">Q", head)[0]
got = first = 0
t_first = t_last = None
while got < n:
    chunk = c.recv(1 << 18)
    if not chunk:
        break
    now = time.monotonic()
    if t_first is None:
        t_first, first = now, len(chunk)
    t_last = now
    got += len(chunk)
c.sendall(b"K")
c.close()
done({"bytes": got, "expected": n, "first_chunk": first, "span_s": (t_last or 0) - (t_first or 0)})
"""

TCP_SENDER = _HEADER + r"""
import fcntl
def dev_of(ip):
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for name in os.listdir("/sys/class/net"):
        try:
            raw = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
        except OSError:
            continue
        if socket.inet_ntoa(raw[20:24]) == ip:
            return name
    return None
def tx(dev):
    with open(f"/sys/class/net/{dev}/statistics/tx_bytes") as f:
        return int(f.read())
dev = dev_of(A["ip"])
if dev is None:
    done({"error": f"no interface holds {A['ip']}"})
n = A["nbytes"]
tx0 = tx(dev)
t_end = time.monotonic() + A["deadline_s"] - 2
while True:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((A["ip"], 0))
    s.settimeout(2.0)
    try:
        s.connect((A["peer_ip"], A["port"]))
        break
    except OSError:
        s.close()
        if time.monotonic() > t_end:
            done({"error": "cannot connect to the receiver"})
        time.sleep(0.05)
s.settimeout(A["deadline_s"])
t0 = time.monotonic()
s.sendall(struct.pack(">Q", n))
block = b"\0" * (1 << 16)
left = n
while left:
    k = min(left, len(block))
    s.sendall(block[:k])
    left -= k
ack = s.recv(1)
elapsed = time.monotonic() - t0
tx1 = tx(dev)
s.close()
done({"dev": dev, "tx_bytes": tx1 - tx0, "elapsed_s": elapsed, "acked": ack == b"K"})
"""

NODE_PINGER = _HEADER + r"""
import urllib.request, urllib.error
base = "http://" + A["admin"]
def call(path, body=None, timeout=10.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())
t_end = time.monotonic() + A["wait_s"]
key, last = A.get("peer_key"), "no answer"
while True:
    try:
        peers = call("/state").get("peers", [])
        if key and any(p.get("key") == key for p in peers):
            break
        if not key:
            match = [p for p in peers if str(p.get("remote", "")).rsplit(":", 1)[0].strip("[]") == A["peer_ip"]]
            if match:
                key = match[0]["key"]
                break
        last = f"peers: {[p.get('key', '?')[:16] for p in peers]}"
    except (OSError, ValueError) as exc:
        last = repr(exc)
    if time.monotonic() > t_end:
        done({"error": f"the neighbour is not a peer of this node ({last})"})
    time.sleep(0.2)
while True:
    warm = call("/ping", {"key": key, "mode": "snek", "count": 2, "timeout_s": A["timeout_s"]}, 2 * A["timeout_s"] + 10)
    if warm["received"]:
        break
    if time.monotonic() > t_end:
        done({"error": "no pong from the neighbour"})
rtt, hops, sent = [], [], 0
left = A["count"]
while left:
    k = min(left, 1000)
    r = call("/ping", {"key": key, "mode": "snek", "count": k, "timeout_s": A["timeout_s"]}, k * A["timeout_s"] + 10)
    rtt += r["rtt_ms"]
    hops += r["hops"]
    sent += r["sent"]
    left -= k
done({"key": key, "sent": sent, "rtt_ms": rtt, "hops": hops})
"""


class MeasureError(NetemError, RuntimeError):
    """A measurement program failed or gave no answer; the message names the container and the program."""


def exec_python(container: Any, program: str, args: dict[str, Any], *, what: str) -> dict[str, Any]:
    """Run ``program`` with ``args`` (JSON) in ``container`` via ``python3 -c``; return its JSON answer.

    Raises MeasureError when it exits non-zero, prints no JSON, or answers ``{"error": ...}``.
    """
    name = getattr(container, "name", "?")
    try:
        code, output = container.exec_run(["python3", "-c", program, json.dumps(args)], demux=True)
    except Exception as exc:  # the SDK raises several unrelated types (APIError, requests errors)
        raise MeasureError(f"{what} in {name}: docker exec failed: {exc}") from exc
    out, err = (output or (b"", b""))
    text = (out or b"").decode(errors="replace").strip()
    if code in (128 + 14, -14):  # SIGALRM (docker exec reports 142, a local subprocess -14): its own deadline
        raise MeasureError(f"{what} in {name}: still running after its deadline of {args.get('deadline_s', '?'):.0f} s "
                           "(host overloaded, or the other side never came)")
    if code != 0 or not text:
        tail = ((err or b"").decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise MeasureError(f"{what} in {name}: exited {code}: {tail}")
    try:
        answer = json.loads(text.splitlines()[-1])
    except ValueError as exc:
        raise MeasureError(f"{what} in {name}: not JSON: {text[-200:]!r}") from exc
    if "error" in answer:
        raise MeasureError(f"{what} in {name}: {answer['error']}")
    return dict(answer)


def _results(futures: list[Future[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every answer, or one MeasureError naming every program that failed (not just the first)."""
    answers, failures = [], []
    for fut in futures:
        try:
            answers.append(fut.result())
        except MeasureError as exc:
            failures.append(str(exc))
    if failures:
        raise MeasureError("; ".join(failures))
    return answers


_Job = tuple[Any, str, dict[str, Any], str]  # (container, program, args, what)


def _pair(first: _Job, second: _Job) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run two programs concurrently (each a (container, program, args, what)); both answers or MeasureError."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="snekbed-measure") as pool:
        a, b = _results([pool.submit(exec_python, c, prog, args, what=what) for c, prog, args, what in (first, second)])
        return a, b


def _port() -> int:
    return random.randint(20_000, 29_999)


# ---------------------------------------------------------------- loss


@dataclass(frozen=True, slots=True)
class LossResult:
    """One direction's one-way loss, counted at the receiver."""

    direction: str
    sent: int
    received: int
    duplicates: int
    send_errors: int

    @property
    def loss_pct(self) -> float:
        return 100.0 * (1 - self.received / self.sent) if self.sent else float("nan")


def udp_loss(a: Any, b: Any, a_ip: str, b_ip: str, *, count: int = 5000, payload_bytes: int = 16,
             rate_mbit: float | None = None, max_pps: float = 2000.0, names: tuple[str, str] = ("a", "b"),
             ) -> tuple[LossResult, LossResult]:
    """One-way loss a->b and b->a (run at the same time), ``count`` probes each.

    Probes are paced at under 40 % of ``rate_mbit`` (counting UDP/IP/Ethernet headers)
    and at most ``max_pps``. Raises MeasureError; ValueError for count < 1.
    """
    if count < 1 or payload_bytes < 5:
        raise ValueError(f"count ({count}) must be >= 1 and payload_bytes ({payload_bytes}) >= 5")
    pps = max_pps
    if rate_mbit is not None:
        pps = min(pps, 0.4 * rate_mbit * 1e6 / ((payload_bytes + 8 + 20 + 14) * 8))
    deadline_s = count / pps + 20
    out = []
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="snekbed-loss") as pool:
        jobs = []
        for (src, src_ip, src_name), (dst, dst_ip, dst_name) in (((a, a_ip, names[0]), (b, b_ip, names[1])),
                                                                  ((b, b_ip, names[1]), (a, a_ip, names[0]))):
            port = _port()
            rx = pool.submit(exec_python, dst, UDP_RECEIVER, {"ip": dst_ip, "port": port, "count": count, "idle_s": 3.0,
                                                              "deadline_s": deadline_s}, what="UDP loss receiver")
            tx = pool.submit(exec_python, src, UDP_SENDER,
                             {"ip": src_ip, "peer_ip": dst_ip, "port": port, "count": count, "pps": pps,
                              "payload_bytes": payload_bytes, "deadline_s": deadline_s}, what="UDP loss sender")
            jobs.append((f"{src_name}->{dst_name}", rx, tx))
        for direction, rx, tx in jobs:
            got, sent = _results([rx, tx])
            out.append(LossResult(direction, int(sent["sent"]), int(got["received"]), int(got["duplicates"]),
                                  int(sent["send_errors"])))
    return out[0], out[1]


# ---------------------------------------------------------------- throughput


@dataclass(frozen=True, slots=True)
class ThroughputResult:
    """One bounded TCP transfer: goodput at the receiver and the link rate it implies."""

    direction: str
    payload_bytes: int
    span_s: float  # receiver: first to last payload byte
    first_chunk: int
    wire_bytes: int  # what the sender's interface transmitted during the transfer
    dev: str

    @property
    def goodput_mbit(self) -> float:
        return (self.payload_bytes - self.first_chunk) * 8 / self.span_s / 1e6 if self.span_s > 0 else float("nan")

    @property
    def overhead(self) -> float:
        """Wire bytes per payload byte (headers and retransmissions)."""
        return self.wire_bytes / self.payload_bytes if self.payload_bytes else float("nan")

    @property
    def link_mbit(self) -> float:
        return self.goodput_mbit * self.overhead


def transfer_bytes(rate_mbit: float | None, *, seconds: float = 3.0, floor: int = 64 << 10, cap: int = 64 << 20) -> int:
    """A transfer size taking about ``seconds`` at ``rate_mbit`` (16 MiB when unlimited), within [floor, cap]."""
    if rate_mbit is None:
        return 16 << 20
    return max(floor, min(cap, int(rate_mbit * 1e6 / 8 * seconds)))


def tcp_throughput(sender: Any, receiver: Any, sender_ip: str, receiver_ip: str, *, nbytes: int,
                   timeout_s: float = 60.0, direction: str = "a->b") -> ThroughputResult:
    """Send ``nbytes`` over one TCP connection sender_ip -> receiver_ip. Raises MeasureError, ValueError."""
    if nbytes < 1 << 12:
        raise ValueError(f"nbytes ({nbytes}) must be at least 4096 to time a transfer")
    port = _port()
    got, sent = _pair(
        (receiver, TCP_RECEIVER, {"ip": receiver_ip, "port": port, "deadline_s": timeout_s}, "TCP receiver"),
        (sender, TCP_SENDER, {"ip": sender_ip, "peer_ip": receiver_ip, "port": port, "nbytes": nbytes,
                              "deadline_s": timeout_s}, "TCP sender"),
    )
    if got["bytes"] != nbytes:
        raise MeasureError(f"TCP transfer {direction}: {got['bytes']} of {nbytes} bytes arrived")
    return ThroughputResult(direction, nbytes, float(got["span_s"]), int(got["first_chunk"]), int(sent["tx_bytes"]),
                            str(sent["dev"]))


def best_throughput(sender: Any, receiver: Any, sender_ip: str, receiver_ip: str, *, nbytes: int,
                    floor_mbit: float, attempts: int = 3, timeout_s: float = 60.0,
                    direction: str = "a->b") -> list[ThroughputResult]:
    """Up to ``attempts`` transfers, stopping at the first whose link rate reaches ``floor_mbit``.

    A rate limiter enforces a ceiling: nothing makes it deliver more than its rate, while a
    stalled program (a busy host, a TCP back-off) makes one reading low. So a low reading is
    measured again, and every attempt is returned (the caller judges the best and shows all).
    Raises MeasureError, ValueError.
    """
    if attempts < 1:
        raise ValueError(f"attempts ({attempts}) must be >= 1")
    results: list[ThroughputResult] = []
    for _ in range(attempts):
        results.append(tcp_throughput(sender, receiver, sender_ip, receiver_ip, nbytes=nbytes, timeout_s=timeout_s,
                                      direction=direction))
        if results[-1].link_mbit >= floor_mbit:
            break
    return results


# ---------------------------------------------------------------- RTT


@dataclass(frozen=True, slots=True)
class RttResult:
    """Round trips of node pings to the link neighbour."""

    sent: int
    rtt_ms: list[float] = field(default_factory=list)
    hops: list[int] = field(default_factory=list)
    key: str = ""

    @property
    def received(self) -> int:
        return len(self.rtt_ms)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.rtt_ms) if self.rtt_ms else float("nan")

    @property
    def p95_ms(self) -> float:
        """Nearest-rank 95th percentile."""
        if not self.rtt_ms:
            return float("nan")
        ordered = sorted(self.rtt_ms)
        return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def node_rtt(container: Any, *, peer_ip: str, peer_key: str | None = None, count: int = 200,
             admin: str = "127.0.0.1:8080", ping_timeout_s: float = 3.0, wait_s: float = 30.0) -> RttResult:
    """``count`` snek pings from the node in ``container`` to its neighbour (by key, else by address).

    Waits up to ``wait_s`` for the neighbour to be a peer and answer a warm-up ping.
    Raises MeasureError (no admin API, not a peer, no pong); ValueError for count < 1.
    """
    if count < 1:
        raise ValueError(f"count ({count}) must be >= 1")
    deadline_s = wait_s + count * ping_timeout_s + 30
    answer = exec_python(container, NODE_PINGER, {"admin": admin, "peer_key": peer_key, "peer_ip": peer_ip,
                                                  "count": count, "timeout_s": ping_timeout_s, "wait_s": wait_s,
                                                  "deadline_s": deadline_s}, what="node ping")
    return RttResult(int(answer["sent"]), [float(x) for x in answer["rtt_ms"]], [int(h) for h in answer["hops"]],
                     str(answer["key"]))
