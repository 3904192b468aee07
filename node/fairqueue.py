"""A bounded per-peer traffic queue with per-flow buckets (PROTOCOL.md §3.4).

Modelled on the reference's fair FIFO: frames are hashed by flow (source and
destination key) into a fixed number of buckets; each bucket holds at most
``depth`` frames and drops its OLDEST frame when a new one arrives while it is
full (head drop keeps the freshest data moving). The writer takes frames round
robin across non-empty buckets, so one heavy flow cannot starve the others.

Every bucket is also bounded in bytes (``bucket_bytes``; one frame always fits),
so a queue never holds more than ``buckets * max(bucket_bytes, 65 535)`` bytes
whatever a peer sends. Items are already-encoded frames (``bytes``).

Reference sizes: 254 buckets of 16 frames, 16 buckets for Bluetooth peers.
"""

from __future__ import annotations

from collections import deque

__all__ = ["BLUETOOTH_BUCKETS", "REFERENCE_BUCKETS", "REFERENCE_DEPTH", "FairQueue"]

REFERENCE_BUCKETS = 254
BLUETOOTH_BUCKETS = 16
REFERENCE_DEPTH = 16
_DEFAULT_BUCKET_BYTES = 128 * 1024


class FairQueue:
    """Round-robin over flow buckets; head drop per bucket.

    ``push`` returns how many frames it had to drop; the caller counts them.
    Raises ValueError on a non-positive size at construction; nothing else.
    """

    __slots__ = ("_active", "_bucket_bytes", "_buckets", "_depth", "_n", "_sizes", "dropped", "frames", "nbytes")

    def __init__(
        self, buckets: int = REFERENCE_BUCKETS, depth: int = REFERENCE_DEPTH, bucket_bytes: int = _DEFAULT_BUCKET_BYTES
    ) -> None:
        if buckets < 1 or depth < 1 or bucket_bytes < 1:
            raise ValueError(f"FairQueue sizes must be positive: buckets={buckets} depth={depth} bytes={bucket_bytes}")
        self._n = buckets
        self._buckets: list[deque[bytes] | None] = [None] * buckets
        self._sizes = [0] * buckets
        self._active: deque[int] = deque()  # buckets holding frames, in round-robin order
        self._depth = depth
        self._bucket_bytes = bucket_bytes
        self.frames = 0  # frames queued now
        self.nbytes = 0  # bytes queued now
        self.dropped = 0  # frames head-dropped since creation

    def __len__(self) -> int:
        return self.frames

    def __bool__(self) -> bool:
        return self.frames > 0

    def bucket_of(self, source_key: bytes, destination_key: bytes) -> int:
        """The flow bucket of a (source, destination) pair (stable for the process's lifetime)."""
        return hash((source_key, destination_key)) % self._n

    def push(self, bucket: int, item: bytes) -> int:
        """Queue ``item`` in ``bucket``; return how many older frames were dropped to make room."""
        b = self._buckets[bucket]
        if b is None:
            b = self._buckets[bucket] = deque()
        n = len(item)
        dropped = 0
        if not b:
            self._active.append(bucket)
        else:
            sizes = self._sizes
            while b and (len(b) >= self._depth or sizes[bucket] + n > self._bucket_bytes):
                old = len(b.popleft())
                sizes[bucket] -= old
                self.nbytes -= old
                dropped += 1
            # an emptied bucket stays listed in _active: the item below refills it
            self.frames -= dropped
            self.dropped += dropped
        b.append(item)
        self._sizes[bucket] += n
        self.nbytes += n
        self.frames += 1
        return dropped

    def pop_into(self, out: list[bytes], budget_bytes: int) -> int:
        """Move frames to ``out`` round robin until ``budget_bytes`` is reached; return the bytes moved."""
        active, buckets, sizes = self._active, self._buckets, self._sizes
        used = 0
        moved = 0
        while active and used < budget_bytes:
            i = active.popleft()
            b = buckets[i]
            assert b is not None
            item = b.popleft()
            n = len(item)
            sizes[i] -= n
            used += n
            moved += 1
            out.append(item)
            if b:
                active.append(i)
        self.frames -= moved
        self.nbytes -= used
        return used

    def clear(self) -> int:
        """Drop everything; return how many frames were dropped."""
        n = self.frames
        self._buckets = [None] * self._n
        self._sizes = [0] * self._n
        self._active.clear()
        self.frames = 0
        self.nbytes = 0
        return n
