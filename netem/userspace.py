"""The node-side link shaper: a pure, deterministic model of one direction of a link.

The node's transports (and the in-process backend, through the same code) ask a
:class:`LinkShaper` what happens to each frame they are about to send::

    shaper = LinkShaper(shape, random.Random(seed))
    at = shaper.schedule(now=trio.current_time(), nbytes=len(frame))
    if at is not None:
        ...  # hold the frame until `at`, then write it to the peer's stream

No clocks, no sockets, no trio: ``now`` is passed in and the randomness comes from
the injected ``random.Random``, so a seed replays a run exactly.

The model, in the order a frame meets it:

1. **Queue** (only with ``rate_mbit``): a FIFO in front of the serialiser. A frame
   that finds ``shape.effective_queue_pkts`` frames already WAITING (the one being
   serialised does not count) is tail-dropped (``dropped="queue"``).
2. **Serialisation** at ``rate_mbit``: a busy-until clock; a frame starts when the
   previous one has finished and takes ``nbytes * 8 / rate`` seconds. No burst
   allowance (the kernel planners use a small tbf burst, 2 frames or 4 ms).
3. **Loss** (``loss_pct``), decided after serialisation: a lost frame still used
   the link (the bytes went out, the far end never got them).
4. **Propagation**: ``delay_ms`` plus jitter drawn uniformly in ``+/- jitter_ms``
   (netem's default distribution; LinkShape guarantees jitter <= delay, so the mean
   stays ``delay_ms``), or ``normal`` clipped at 0.
5. **Order**: with ``ordered=True`` (the default: our peerings are reliable,
   ordered byte streams) no frame is delivered before the frame scheduled before it.

Loss on a reliable stream. A real TCP would retransmit a lost segment, so on a
stream, packet loss shows up as delay, never as a missing frame. Two modes:

* ``loss_mode="drop"`` (default): the whole frame is dropped before it enters the
  stream, as the per-peer queue of PROTOCOL.md section 3.4 drops frames. The stream
  stays well-formed (frames are dropped whole) and the overlay sees frame loss,
  which is what routing experiments need to exercise.
* ``loss_mode="retransmit"``: the frame arrives one retransmission timeout late
  (``rto_s``, doubling for each further loss, as TCP backs off) and, ordered,
  holds back the frames behind it. This matches what kernel-shaped loss does to a
  TCP peering; use it to compare with the kernel backends.

Duplicate, corrupt and reorder only make sense for datagram links
(``ordered=False``): there a duplicate is delivered a second time (with its own
delay draw), a corrupt frame is delivered with ``Verdict.corrupt=True`` (the
transport flips a byte), and a reordered frame skips the delay (netem's
semantics). On an ordered stream TCP would discard duplicates, turn corruption into
a checksum failure (so: treated as loss, per ``loss_mode``) and restore order, so
duplicates and reordering have no effect there.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from contract.links import LinkShape

__all__ = ["LinkShaper", "ShaperStats", "Verdict", "shaper_factory"]

DropReason = Literal["queue", "loss", "corrupt"]
_MAX_RETRANSMITS = 15  # TCP gives up after about this many (net.ipv4.tcp_retries2)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What happens to one frame: when each copy arrives (empty = never) and why not."""

    deliver_at: tuple[float, ...]
    dropped: DropReason | None = None
    corrupt: bool = False
    retransmits: int = 0


@dataclass(slots=True)
class ShaperStats:
    """Counters since the shaper was created (for metrics and `links check`)."""

    frames: int = 0
    bytes: int = 0
    delivered: int = 0
    delayed: int = 0  # frames delivered later than offered (delay, jitter, rate, a retransmission)
    dropped_queue: int = 0
    dropped_loss: int = 0
    dropped_corrupt: int = 0
    duplicated: int = 0
    corrupted: int = 0
    reordered: int = 0
    retransmits: int = 0


class LinkShaper:
    """Schedules frames over one direction of a link shaped by a LinkShape.

    Raises ValueError when time goes backwards, on nbytes < 1, or on bad options;
    any other exception is a bug.
    """

    def __init__(
        self,
        shape: LinkShape,
        rng: random.Random,
        *,
        ordered: bool = True,
        loss_mode: Literal["drop", "retransmit"] = "drop",
        rto_s: float = 0.2,
        jitter: Literal["uniform", "normal"] = "uniform",
    ) -> None:
        if loss_mode not in ("drop", "retransmit"):
            raise ValueError(f"loss_mode must be 'drop' or 'retransmit', not {loss_mode!r}")
        if jitter not in ("uniform", "normal"):
            raise ValueError(f"jitter must be 'uniform' or 'normal', not {jitter!r}")
        if not rto_s > 0:
            raise ValueError(f"rto_s must be > 0 (Linux's minimum RTO is 0.2 s), not {rto_s!r}")
        self.shape, self.rng = shape, rng
        self.ordered, self.loss_mode, self.rto_s, self.jitter = ordered, loss_mode, rto_s, jitter
        self.stats = ShaperStats()
        self._bits_per_s = shape.rate_mbit * 1e6 if shape.rate_mbit is not None else None
        self._queue_limit = shape.effective_queue_pkts
        self._waiting: deque[float] = deque()  # serialisation start times of accepted frames not yet started
        self._busy_until = float("-inf")
        self._last_now = float("-inf")
        self._last_delivery = float("-inf")
        # An ordered stream with no random loss, corruption, duplication or reordering (every in-process link
        # the simulator shapes from a link class) takes _schedule_clean: the same arithmetic and the same RNG
        # draws as send(), without the Verdict and the method calls per frame (the simulator's hottest
        # Python path after the router).
        self._clean_stream = ordered and not (shape.loss_pct or shape.corrupt_pct or shape.duplicate_pct
                                              or shape.reorder_pct)

    # ------------------------------------------------------------ public API

    def schedule(self, now: float, nbytes: int) -> float | None:
        """Offer ``nbytes`` at ``now``; the time they are delivered at the far end, or None if lost.

        For datagram shapers with duplication this is the first copy; use :meth:`send`
        to see every copy and the corrupt flag. Raises ValueError (see class).
        """
        if self._clean_stream:
            return self._schedule_clean(now, nbytes)
        verdict = self.send(now, nbytes)
        return verdict.deliver_at[0] if verdict.deliver_at else None

    def send(self, now: float, nbytes: int) -> Verdict:
        """Offer one frame of ``nbytes`` at ``now`` and return its full Verdict. Raises ValueError."""
        if self._clean_stream:
            at = self._schedule_clean(now, nbytes)
            return Verdict((), "queue") if at is None else Verdict((at,))
        if now < self._last_now:
            raise ValueError(f"time went backwards: now={now!r} after {self._last_now!r}")
        if not isinstance(nbytes, int) or nbytes < 1:
            raise ValueError(f"nbytes must be a positive int, not {nbytes!r}")
        self._last_now = now
        self.stats.frames += 1
        self.stats.bytes += nbytes
        shape = self.shape

        tx_end = self._serialise(now, nbytes)
        if tx_end is None:
            self.stats.dropped_queue += 1
            return Verdict((), "queue")

        lost = self._chance(shape.loss_pct)
        corrupt = self._chance(shape.corrupt_pct)
        duplicate = self._chance(shape.duplicate_pct)
        reorder = self._chance(shape.reorder_pct)

        verdict = (self._send_stream(tx_end, lost, corrupt) if self.ordered
                   else self._send_datagram(tx_end, lost, corrupt, duplicate, reorder))
        if verdict.deliver_at and verdict.deliver_at[0] > now:
            self.stats.delayed += 1
        return verdict

    def backlog(self, now: float) -> int:
        """Frames waiting for the serialiser at ``now`` (not counting the one being sent)."""
        while self._waiting and self._waiting[0] <= now:
            self._waiting.popleft()
        return len(self._waiting)

    @property
    def busy_until(self) -> float:
        """When the serialiser finishes the frames accepted so far (-inf if it never ran)."""
        return self._busy_until

    # ------------------------------------------------------------ the model

    def _schedule_clean(self, now: float, nbytes: int) -> float | None:
        """send() for a clean ordered stream (``_clean_stream``), inlined: the delivery time, None if tail-dropped."""
        if now < self._last_now:
            raise ValueError(f"time went backwards: now={now!r} after {self._last_now!r}")
        if not isinstance(nbytes, int) or nbytes < 1:
            raise ValueError(f"nbytes must be a positive int, not {nbytes!r}")
        self._last_now = now
        stats = self.stats
        stats.frames += 1
        stats.bytes += nbytes
        bits_per_s = self._bits_per_s
        if bits_per_s is None:
            tx_end = now
        else:  # _serialise
            waiting = self._waiting
            while waiting and waiting[0] <= now:
                waiting.popleft()
            if len(waiting) >= self._queue_limit:  # type: ignore[operator]
                stats.dropped_queue += 1
                return None
            busy = self._busy_until
            start = busy if busy > now else now
            if start > now:
                waiting.append(start)
            tx_end = self._busy_until = start + nbytes * 8 / bits_per_s
        shape = self.shape  # _propagation_s, inlined
        delay_ms, jitter_ms = shape.delay_ms, shape.jitter_ms
        if jitter_ms:
            if self.jitter == "uniform":
                delay_ms += self.rng.uniform(-jitter_ms, jitter_ms)
            else:
                delay_ms = self.rng.gauss(delay_ms, jitter_ms)
        at = tx_end + (delay_ms if delay_ms > 0.0 else 0.0) / 1000
        if at < self._last_delivery:  # _in_order
            at = self._last_delivery
        self._last_delivery = at
        stats.delivered += 1
        if at > now:
            stats.delayed += 1
        return at

    def _chance(self, pct: float) -> bool:
        return bool(pct) and self.rng.random() * 100 < pct

    def _serialise(self, now: float, nbytes: int) -> float | None:
        """Admit to the queue and serialise; the time the last bit leaves, or None if tail-dropped."""
        if self._bits_per_s is None:
            return now
        assert self._queue_limit is not None
        if self.backlog(now) >= self._queue_limit:
            return None
        start = max(now, self._busy_until)
        if start > now:
            self._waiting.append(start)
        self._busy_until = start + nbytes * 8 / self._bits_per_s
        return self._busy_until

    def _propagation_s(self) -> float:
        delay_ms, jitter_ms = self.shape.delay_ms, self.shape.jitter_ms
        if jitter_ms:
            if self.jitter == "uniform":
                delay_ms += self.rng.uniform(-jitter_ms, jitter_ms)
            else:
                delay_ms = self.rng.gauss(delay_ms, jitter_ms)
        return max(0.0, delay_ms) / 1000

    def _send_stream(self, tx_end: float, lost: bool, corrupt: bool) -> Verdict:
        if lost or corrupt:  # a corrupted segment fails its checksum: to a stream, it is lost
            if self.loss_mode == "drop":
                if lost:
                    self.stats.dropped_loss += 1
                    return Verdict((), "loss")
                self.stats.dropped_corrupt += 1
                return Verdict((), "corrupt")
            retransmits, extra_s = 1, self.rto_s
            while retransmits < _MAX_RETRANSMITS and self._chance(self.shape.loss_pct):
                extra_s += self.rto_s * 2**retransmits
                retransmits += 1
            self.stats.retransmits += retransmits
            at = self._in_order(tx_end + extra_s + self._propagation_s())
            self.stats.delivered += 1
            return Verdict((at,), None, False, retransmits)
        at = self._in_order(tx_end + self._propagation_s())
        self.stats.delivered += 1
        return Verdict((at,))

    def _in_order(self, at: float) -> float:
        at = max(at, self._last_delivery)
        self._last_delivery = at
        return at

    def _send_datagram(self, tx_end: float, lost: bool, corrupt: bool, duplicate: bool, reorder: bool) -> Verdict:
        if lost:
            self.stats.dropped_loss += 1
            return Verdict((), "loss")
        if reorder:
            self.stats.reordered += 1
            first = tx_end
        else:
            first = tx_end + self._propagation_s()
        times = [first]
        if duplicate:
            self.stats.duplicated += 1
            times.append(tx_end + self._propagation_s())
        if corrupt:
            self.stats.corrupted += 1
        self.stats.delivered += 1
        return Verdict(tuple(times), None, corrupt)


def shaper_factory(shape: LinkShape, **options: Any) -> Callable[[random.Random], Callable[[float, int], float | None]]:
    """``rng -> schedule``: one fresh LinkShaper per link end, in the shape the in-process
    backend's ``shapers`` mapping takes (``{"bluetooth": shaper_factory(cls.shape)}``).

    ``options`` are LinkShaper's keyword options; they are checked now (ValueError).
    """
    LinkShaper(shape, random.Random(0), **options)  # fail at configuration time, not mid-run

    def make(rng: random.Random) -> Callable[[float, int], float | None]:
        return LinkShaper(shape, rng, **options).schedule

    return make
