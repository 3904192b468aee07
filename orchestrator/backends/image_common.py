"""What every step of an image build shares: its errors, the cache directory, host-wide locks, and host
commands (pip, debootstrap, tar) run with their output streamed and their whole process group stopped
when the build is interrupted.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["ImageError", "CommandError", "BaseImageError", "BaseCommandError", "WheelhouseError", "ImageBuildError",
           "Progress", "LABEL_IMAGE", "LABEL_INPUTS", "default_cache_dir", "ensure_dir", "file_lock",
           "run_streaming", "kill_process_group", "group_running", "no_progress"]

LABEL_IMAGE = "snekbed.image"
LABEL_INPUTS = "snekbed.inputs"
LOCK_DIR = Path(tempfile.gettempdir()) / "snekbed-locks"  # host-wide, so builds with any cache dir take turns
GROUP_KILL_GRACE_S = 5.0

Progress = Callable[[str], None]


class ImageError(Exception):
    """Base: the node image or one of its inputs could not be made."""


class CommandError(ImageError):
    """A host command (pip, debootstrap, tar) failed; `output` holds what it printed."""

    def __init__(self, argv: list[str], returncode: int, output: str) -> None:
        tail = "\n".join(output.strip().splitlines()[-15:])
        super().__init__(f"{' '.join(argv[:4])} ... exited {returncode}:\n{tail}")
        self.argv, self.returncode, self.output = argv, returncode, output


class BaseImageError(ImageError):
    """The base image could not be found, pulled or built."""


class BaseCommandError(CommandError, BaseImageError):
    """debootstrap or tar failed while building the offline base."""


class WheelhouseError(CommandError):
    """pip failed while building the wheelhouse."""


class ImageBuildError(ImageError):
    """`docker build` of the node image failed; `log` holds the build output."""

    def __init__(self, tag: str, message: str, log: list[str]) -> None:
        super().__init__(f"building {tag} failed: {message.strip()}\n{''.join(log[-15:]).rstrip()}")
        self.tag, self.message, self.log = tag, message, log


def no_progress(_: str) -> None:
    """The default progress callback."""


def ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_cache_dir() -> Path:
    """``$SNEKBED_CACHE_DIR``, else ``$XDG_CACHE_HOME/snekbed``, else ``~/.cache/snekbed``."""
    if env := os.environ.get("SNEKBED_CACHE_DIR"):
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "snekbed"


@contextlib.contextmanager
def file_lock(name: str, lock_dir: Path | None = None) -> Iterator[None]:
    """Hold an exclusive flock on `name` in `lock_dir` (default: host-wide, whatever the cache dir)."""
    with open(ensure_dir(lock_dir or LOCK_DIR) / name, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        yield


def run_streaming(argv: list[str], progress: Progress, error: type[CommandError]) -> str:
    """Run `argv`, passing each output line to `progress`; return the output. Raises `error`.

    The child runs in its own process group (debootstrap and pip start children of their own): when
    anything interrupts us (Ctrl-C, an exception from `progress`), the whole group is terminated
    (SIGTERM, then SIGKILL after GROUP_KILL_GRACE_S) before the exception propagates.
    """
    lines: list[str] = []
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}, start_new_session=True)
    except OSError as exc:
        raise error(argv, -1, str(exc)) from exc
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            progress(line.rstrip())
        proc.wait()
    except BaseException:
        kill_process_group(proc)
        raise
    finally:
        proc.stdout.close()
    if proc.returncode != 0:
        raise error(argv, proc.returncode, "".join(lines))
    return "".join(lines)


def kill_process_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group ``proc`` leads, SIGKILL it after GROUP_KILL_GRACE_S; reap ``proc``."""
    for sig, wait_s in ((signal.SIGTERM, GROUP_KILL_GRACE_S), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        deadline = time.monotonic() + (wait_s or 0.0)
        while group_running(proc.pid) and time.monotonic() < deadline:  # the leader is gone; its children?
            time.sleep(0.05)
        if not group_running(proc.pid):
            return


def group_running(pgid: int) -> list[int]:
    """Pids of the processes in group ``pgid`` that still run (zombies waiting for a reaper do not)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(stat.parent.name))
    return found
