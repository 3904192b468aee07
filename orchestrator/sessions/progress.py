"""A progress line for long in-process runs (``snekbed sim``, in-process ``snekbed chaos``): docs/performance.md.

A simulation of thousands of nodes works for minutes without a word; a user cannot tell a slow run from a hung one,
nor see the memory grow. :class:`ProgressLine` reads a :class:`Snapshot` of the run every few wall-clock seconds
from a thread of its own and writes one line to stderr: protocol time and its pace, frames delivered and their rate,
events queued (frames in flight plus each node's next timer), resident memory, convergence so far, and when the run
gives up at the latest at this pace. The simulation's loop is not touched (the thread only reads counters that
the loop keeps anyway), so the same seed gives the same result with or without it.

Where stderr is a terminal the line is a rich progress display, redrawn every half second; elsewhere (CI logs, a
pipe) it is a plain line every ``every_s`` seconds. A last line says how the run ended.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import IO, Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn

__all__ = ["PLAIN_EVERY_S", "ProgressLine", "Snapshot", "Watch", "format_line", "resident_bytes"]

#: seconds between two plain lines (a terminal's display is redrawn every TTY_EVERY_S)
PLAIN_EVERY_S = 5.0
TTY_EVERY_S = 0.5


@dataclass(frozen=True)
class Snapshot:
    """What a run can say about itself at one instant (read from another thread: plain attribute reads only)."""

    phase: str
    protocol_s: float
    frames: int  # frames delivered so far
    queued: int  # events waiting in the simulator's queue: frames in flight and each node's next timer
    tree_s: float | None = None  # the tree converged this long after the phase's start (None: not yet)
    snake_s: float | None = None
    gives_up_at_s: float | None = None  # the protocol time at which this phase stops waiting (None: no bound)
    judged: bool = True  # False: the run does not track convergence itself (a chaos run: its steps say it)


#: makes the context that watches a run while it works, given how to read the run (a ProgressLine)
Watch = Callable[[Callable[[], "Snapshot | None"]], AbstractContextManager[Any]]


def resident_bytes() -> int:
    """This process's resident memory now (Linux /proc; 0 where it cannot be read)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _si(x: float) -> str:
    for div, unit in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if abs(x) >= div:
            return f"{x / div:.2f}{unit}"
    return f"{x:.0f}"


def _duration(s: float) -> str:
    s = max(0.0, s)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _convergence(snap: Snapshot) -> str:
    if not snap.judged:
        return ""
    if snap.snake_s is not None:
        return f"converged (tree {snap.tree_s:.1f} s, snake {snap.snake_s:.1f} s)"
    if snap.tree_s is not None:
        return f"tree converged at {snap.tree_s:.1f} s, snake not yet"
    return "not converged yet"


def format_line(snap: Snapshot, prev: Snapshot | None, dt_wall: float, wall_s: float, rss: int) -> str:
    """One progress line. ``prev`` is the snapshot ``dt_wall`` wall seconds earlier (None for the first)."""
    pace = fps = None
    if prev is not None and dt_wall > 0:
        pace = (snap.protocol_s - prev.protocol_s) / dt_wall
        fps = (snap.frames - prev.frames) / dt_wall
    parts = [f"[{_duration(wall_s):>7}] {snap.phase}: protocol time {snap.protocol_s:.1f} s"
             + (f" ({pace:.2f} s/s)" if pace is not None else ""),
             f"frames {_si(snap.frames)}" + (f" ({_si(fps)}/s)" if fps is not None else ""),
             f"queued {_si(snap.queued)}",
             f"RSS {rss / 2**30:.2f} GiB"]
    if conv := _convergence(snap):
        parts.append(conv)
    if snap.gives_up_at_s is not None and snap.snake_s is None and pace:
        parts.append(f"gives up within ~{_duration((snap.gives_up_at_s - snap.protocol_s) / pace)} at this pace")
    return " | ".join(parts)


class ProgressLine:
    """Reports ``read()`` every ``every_s`` wall seconds on ``stream`` until :meth:`stop` (a context manager).

    ``read`` may return None while there is nothing to report yet (the network is not built)."""

    def __init__(self, read: Callable[[], Snapshot | None], stream: IO[str] | None = None,
                 every_s: float | None = None, tty: bool | None = None) -> None:  # fmt: skip
        self.read = read
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.every_s = every_s if every_s is not None else (TTY_EVERY_S if self.tty else PLAIN_EVERY_S)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="snekbed-progress", daemon=True)
        self._t0 = time.monotonic()
        self._prev: tuple[float, Snapshot] | None = None
        self._rich: Any = None
        self.lines = 0  # plain lines written

    def __enter__(self) -> ProgressLine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(ok=exc[0] is None)

    def start(self) -> None:
        if self.tty:
            self._rich = Progress(SpinnerColumn(), TextColumn("{task.description}"), transient=True,
                                  console=Console(file=self.stream))  # fmt: skip
            self._rich.start()
            self._task = self._rich.add_task("starting", total=None)
        self._thread.start()

    def stop(self, ok: bool = True) -> None:
        self._stop.set()
        self._thread.join()
        if self._rich is not None:
            self._rich.stop()
        snap = self.read()
        if snap is not None and (self.lines or self._rich is not None):  # a run too short for a line: none at all
            wall = time.monotonic() - self._t0
            state = "done" if ok else "stopped"
            self._write(f"{state} after {_duration(wall)}: protocol time {snap.protocol_s:.1f} s, "
                        f"frames {_si(snap.frames)}, peak RSS {_peak_bytes() / 2**30:.2f} GiB", plain=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.tick()

    def tick(self) -> None:
        """Read and report once (the thread calls it every ``every_s``)."""
        snap = self.read()
        if snap is None:
            return
        now = time.monotonic()
        prev, dt = (self._prev[1], now - self._prev[0]) if self._prev is not None else (None, 0.0)
        self._prev = (now, snap)
        line = format_line(snap, prev, dt, now - self._t0, resident_bytes())
        if self._rich is not None:
            self._rich.update(self._task, description=line)
        else:
            self._write(line)

    def _write(self, line: str, plain: bool = False) -> None:
        if self._rich is not None and not plain:
            return
        print(line, file=self.stream, flush=True)
        self.lines += 1
