"""Bluetooth L2CAP for peerings: connected ``SOCK_SEQPACKET`` sockets as trio streams, start-up checks, adapters.

A peering is a byte stream (PROTOCOL.md §3.1); L2CAP in connection-oriented
mode is a sequence of messages. :class:`SeqpacketStream` carries the byte
stream over the messages the way the reference's mobile transports do (its
router sees a Bluetooth peering as a plain byte stream, frames not aligned to
messages): :meth:`~SeqpacketStream.send_all` cuts the bytes into messages of at
most the channel's outgoing MTU, and :meth:`~SeqpacketStream.receive_some`
returns message bytes, which the node's frame splitter reassembles exactly as
it does TCP segments. So the handshake, keepalives, read and write deadlines,
the fair queue (16 buckets for link type bluetooth) and userspace shaping are
the TCP ones, unchanged.

Which sockets carry the messages is a :class:`SeqpacketFamily`: :data:`L2CAP`
(``AF_BLUETOOTH``, ``BTPROTO_L2CAP``, socket address ``(BDADDR, PSM)``) in a
node, or :func:`unix_stand_in` (``AF_UNIX`` ``SOCK_SEQPACKET``: the same
message semantics, a path per address and PSM) in the tests, which is how this
transport was tested: no Bluetooth adapter was available.

:func:`missing` says what this machine lacks for Bluetooth (a Python built
with Bluetooth sockets, the kernel's Bluetooth sockets, an adapter); the node
refuses every Bluetooth option at start with that message.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import struct
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio

__all__ = [
    "BDADDR_ANY",
    "DEFAULT_MTU",
    "L2CAP",
    "Adapter",
    "SeqpacketFamily",
    "SeqpacketStream",
    "adapters",
    "connect",
    "missing",
    "remote_name",
    "serve",
    "unavailable",
    "unix_stand_in",
]

log = logging.getLogger("snekbed.node.bluetooth")

#: Linux's numbers, for checking the kernel when Python itself has no Bluetooth constants.
_AF_BLUETOOTH = 31
_BTPROTO_L2CAP = 0
_BTPROTO_HCI = 1
_SOL_L2CAP = 6
_L2CAP_OPTIONS = 1
_HCIGETDEVINFO = 0x800448D3  # _IOR('H', 211, int)
_HCI_UP = 1 << 0

BDADDR_ANY = "00:00:00:00:00:00"
#: L2CAP's default MTU (Bluetooth Core, Vol 3 Part A): what a channel carries when the socket cannot say.
DEFAULT_MTU = 672
RECV_BYTES = 65_536  # above the largest L2CAP MTU (65535): a message is never truncated
SYS_CLASS_BLUETOOTH = Path("/sys/class/bluetooth")


# ================================================================ what is missing


def missing(sys_class: Path = SYS_CLASS_BLUETOOTH) -> list[str]:
    """What this machine lacks for Bluetooth L2CAP, one sentence each; empty when everything is there.

    Checks all three, independently: Python's ``socket`` module has ``AF_BLUETOOTH`` and
    ``BTPROTO_L2CAP``; the kernel opens an L2CAP ``SOCK_SEQPACKET`` socket (tried with Linux's
    numbers when Python lacks the constants); ``sys_class`` lists an adapter (``hciN``).
    """
    out: list[str] = []
    have_python = hasattr(socket, "AF_BLUETOOTH") and hasattr(socket, "BTPROTO_L2CAP")
    if not have_python:
        out.append(f"this Python ({sys.executable}, {sys.version.split()[0]}) was built without Bluetooth sockets "
                   "(socket.AF_BLUETOOTH / socket.BTPROTO_L2CAP are missing; Debian's python3 has them)")  # fmt: skip
    family = getattr(socket, "AF_BLUETOOTH", _AF_BLUETOOTH)
    proto = getattr(socket, "BTPROTO_L2CAP", _BTPROTO_L2CAP)
    if have_python or sys.platform.startswith("linux"):
        try:
            socket.socket(family, socket.SOCK_SEQPACKET, proto).close()
        except OSError as exc:
            name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            hint = ("the kernel has no Bluetooth sockets (is the bluetooth module loaded? modprobe bluetooth)"
                    if exc.errno in (errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT, errno.ESOCKTNOSUPPORT)
                    else "the kernel refused a Bluetooth socket")  # fmt: skip
            call = "socket(AF_BLUETOOTH, SOCK_SEQPACKET, BTPROTO_L2CAP)"
            out.append(f"{hint}: {call} failed with {name} ({exc.strerror})")
    if not _adapter_names(sys_class):
        where = "is empty" if sys_class.is_dir() else "does not exist"
        out.append(f"no Bluetooth adapter ({sys_class} {where})")
    return out


def unavailable(sys_class: Path = SYS_CLASS_BLUETOOTH) -> str | None:
    """None when Bluetooth can be used, else one message naming everything :func:`missing` found."""
    gaps = missing(sys_class)
    if not gaps:
        return None
    return "Bluetooth is not available on this machine: " + "; ".join(gaps)


# ================================================================ adapters


@dataclass(frozen=True, slots=True)
class Adapter:
    """One Bluetooth adapter; fields the machine would not tell are None."""

    name: str
    address: str | None = None
    powered: bool | None = None
    rfkill_blocked: bool | None = None

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "address": self.address, "powered": self.powered,
                "rfkill_blocked": self.rfkill_blocked}  # fmt: skip


def _adapter_names(sys_class: Path) -> list[str]:
    try:
        entries = sorted(p.name for p in sys_class.iterdir())
    except OSError:
        return []
    return [n for n in entries if ":" not in n]  # hci0:12 is a connection, not an adapter


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _devinfo(index: int) -> tuple[str | None, bool | None]:
    """(address, powered) from the HCIGETDEVINFO ioctl; (None, None) when it cannot be asked."""
    family = getattr(socket, "AF_BLUETOOTH", None)
    proto = getattr(socket, "BTPROTO_HCI", _BTPROTO_HCI)
    if family is None:
        return None, None
    try:
        with socket.socket(family, socket.SOCK_RAW, proto) as s:
            raw = fcntl.ioctl(s.fileno(), _HCIGETDEVINFO, struct.pack("=H", index) + bytes(90))
    except OSError:
        return None, None
    # struct hci_dev_info: u16 dev_id; char name[8]; bdaddr_t bdaddr (6 bytes, little-endian); u32 flags; ...
    bdaddr = raw[10:16]
    (flags,) = struct.unpack_from("=I", raw, 16)
    return ":".join(f"{b:02X}" for b in reversed(bdaddr)), bool(flags & _HCI_UP)


def adapters(sys_class: Path = SYS_CLASS_BLUETOOTH) -> list[Adapter]:
    """The adapters ``sys_class`` lists, with address, powered and rfkill state where readable."""
    out = []
    for name in _adapter_names(sys_class):
        base = sys_class / name
        address = _read(base / "address")  # older kernels only
        powered: bool | None = None
        if name.startswith("hci") and name[3:].isdigit():
            addr2, powered = _devinfo(int(name[3:]))
            address = address or addr2
        blocked: bool | None = None
        for rf in sorted(base.glob("rfkill*")):
            soft, hard = _read(rf / "soft"), _read(rf / "hard")
            if soft is not None or hard is not None:
                blocked = soft == "1" or hard == "1"
        out.append(Adapter(name, address.upper() if address else None, powered, blocked))
    return out


# ================================================================ the stream


class SeqpacketStream(trio.abc.HalfCloseableStream):
    """A byte stream over a connected ``SOCK_SEQPACKET`` socket (see the module docstring).

    ``mtu`` bounds each message sent. Received messages are read whole into a buffer of
    :data:`RECV_BYTES` and handed out in pieces of at most ``max_bytes``; a truncated message
    (longer than the buffer) breaks the stream rather than silently losing bytes. An empty
    message reads as end of stream, as the socket gives no other way to tell; this stream
    never sends one.
    """

    def __init__(self, sock: trio.socket.SocketType, mtu: int) -> None:
        if sock.type != socket.SOCK_SEQPACKET:
            raise ValueError(f"SeqpacketStream needs a SOCK_SEQPACKET socket, got {sock.type!r}")
        if mtu < 1:
            raise ValueError(f"mtu must be positive, got {mtu}")
        self.socket = sock
        self.mtu = mtu
        self._pending = memoryview(b"")
        self._sending = False
        self._receiving = False
        self._closed = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data`` as messages of at most ``mtu`` bytes. Raises BrokenResourceError, ClosedResourceError."""
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this stream")
        self._sending = True
        try:
            if self._closed:
                raise trio.ClosedResourceError("the stream is closed")
            view = memoryview(data).cast("B")
            if not view:
                await trio.lowlevel.checkpoint()
                return
            mtu = self.mtu
            for start in range(0, len(view), mtu):
                chunk = view[start : start + mtu]
                try:
                    sent = await self.socket.send(chunk)
                except OSError as exc:
                    if self._closed:
                        raise trio.ClosedResourceError("the stream was closed while sending") from None
                    raise trio.BrokenResourceError(f"send failed: {exc}") from exc
                if sent != len(chunk):  # a SEQPACKET send is all or nothing; anything else breaks the byte order
                    raise trio.BrokenResourceError(f"sent {sent} of a {len(chunk)}-byte message")
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the stream is closed")
        await self.socket.wait_writable()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The next bytes (at most ``max_bytes``), b"" at end of stream. Raises BrokenResourceError."""
        if self._receiving:
            raise trio.BusyResourceError("another task is receiving on this stream")
        if max_bytes is not None and max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        self._receiving = True
        try:
            if self._closed:
                raise trio.ClosedResourceError("the stream is closed")
            if not self._pending:
                try:
                    data, _, flags, _ = await self.socket.recvmsg(RECV_BYTES)
                except OSError as exc:
                    if self._closed:
                        raise trio.ClosedResourceError("the stream was closed while receiving") from None
                    raise trio.BrokenResourceError(f"receive failed: {exc}") from exc
                if flags & socket.MSG_TRUNC:
                    raise trio.BrokenResourceError(f"a message longer than {RECV_BYTES} bytes was truncated")
                if not data:
                    return b""
                self._pending = memoryview(data)
            else:
                await trio.lowlevel.checkpoint()
            n = len(self._pending) if max_bytes is None else min(max_bytes, len(self._pending))
            out = bytes(self._pending[:n])
            self._pending = self._pending[n:]
            return out
        finally:
            self._receiving = False

    async def send_eof(self) -> None:
        """Shut down the sending side (the peer reads end of stream)."""
        if self._closed:
            raise trio.ClosedResourceError("the stream is closed")
        await trio.lowlevel.checkpoint()
        try:
            self.socket.shutdown(socket.SHUT_WR)
        except OSError as exc:
            raise trio.BrokenResourceError(f"shutdown failed: {exc}") from exc

    async def aclose(self) -> None:
        """Close the socket (idempotent); a task blocked on it sees ClosedResourceError."""
        if not self._closed:
            self._closed = True
            self.socket.close()
        await trio.lowlevel.checkpoint()


# ================================================================ families, connect, listen


def _l2cap_options(sock: trio.socket.SocketType) -> tuple[int, int] | None:
    """(outgoing MTU, incoming MTU) of an L2CAP socket, None when the kernel will not say."""
    try:
        raw = sock.getsockopt(_SOL_L2CAP, _L2CAP_OPTIONS, 12)
    except OSError:
        return None
    omtu, imtu = struct.unpack_from("=HH", raw, 0)
    return omtu, imtu


def _l2cap_prepare(sock: trio.socket.SocketType) -> None:
    """Ask for the largest incoming MTU before connecting or listening (fewer, larger messages); best effort."""
    try:
        raw = bytearray(sock.getsockopt(_SOL_L2CAP, _L2CAP_OPTIONS, 12))
        struct.pack_into("=H", raw, 2, 65535)
        sock.setsockopt(_SOL_L2CAP, _L2CAP_OPTIONS, bytes(raw))
    except OSError as exc:
        log.debug("L2CAP options not set: %s", exc)


def _l2cap_mtu(sock: trio.socket.SocketType) -> int:
    opts = _l2cap_options(sock)
    return opts[0] if opts and opts[0] >= 48 else DEFAULT_MTU  # 48: L2CAP's minimum MTU


def _l2cap_name(addr: object) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"bluetooth://{str(addr[0]).upper()}/{addr[1]}"
    return f"bluetooth://{addr}"


@dataclass(frozen=True)
class SeqpacketFamily:
    """Which ``SOCK_SEQPACKET`` sockets carry Bluetooth peerings: L2CAP, or an AF_UNIX stand-in in tests."""

    name: str
    family: int
    proto: int
    #: (Bluetooth address, PSM) -> the socket address
    sockaddr: Callable[[str, int], object]
    #: the connected socket -> the largest message to send
    mtu: Callable[[trio.socket.SocketType], int]
    #: a socket address (peer or local) -> how logs and the admin API show it
    describe: Callable[[object], str]
    #: None when usable, else why not (checked when a node starts with a Bluetooth option)
    unavailable: Callable[[], str | None]
    #: called on a fresh socket before connect or bind
    prepare: Callable[[trio.socket.SocketType], None] = field(default=lambda sock: None)

    def open_socket(self) -> trio.socket.SocketType:
        """A new socket of this family. Raises OSError."""
        sock = trio.socket.socket(self.family, socket.SOCK_SEQPACKET, self.proto)
        try:
            self.prepare(sock)
        except BaseException:
            sock.close()
            raise
        return sock

    async def connect(self, address: str, psm: int, timeout_s: float) -> SeqpacketStream:
        """Connect to (address, psm) within ``timeout_s``; the :data:`node.peering.Connect` shape.

        Raises OSError or trio.TooSlowError.
        """
        return await connect(self, address, psm, timeout_s)


def _l2cap_unavailable() -> str | None:
    return unavailable()


#: Bluetooth L2CAP (Linux). The family and protocol numbers are Linux's when Python lacks the constants:
#: a node checks :func:`unavailable` before it uses them.
L2CAP = SeqpacketFamily(
    name="l2cap",
    family=getattr(socket, "AF_BLUETOOTH", _AF_BLUETOOTH),
    proto=getattr(socket, "BTPROTO_L2CAP", _BTPROTO_L2CAP),
    sockaddr=lambda address, psm: (address, psm),
    mtu=_l2cap_mtu,
    describe=_l2cap_name,
    unavailable=_l2cap_unavailable,
    prepare=_l2cap_prepare,
)


def unix_stand_in(directory: str | os.PathLike[str], mtu: int = DEFAULT_MTU) -> SeqpacketFamily:
    """``AF_UNIX`` ``SOCK_SEQPACKET`` sockets standing in for L2CAP: address ``AA:..:FF`` and PSM ``p`` become the
    path ``directory/AA-..-FF.p``; every message is at most ``mtu`` bytes. The same message semantics as
    L2CAP (boundaries kept, in order, reliable), so the transport is testable without an adapter."""
    base = Path(directory)

    def sockaddr(address: str, psm: int) -> str:
        return str(base / f"{address.replace(':', '-')}.{psm}")

    def describe(addr: object) -> str:
        if isinstance(addr, str) and addr:
            stem, _, psm = Path(addr).name.rpartition(".")
            return f"bluetooth://{stem.replace('-', ':')}/{psm}"
        return "bluetooth://unix"

    return SeqpacketFamily("unix", socket.AF_UNIX, 0, sockaddr, lambda sock: mtu, describe, lambda: None)


async def connect(fam: SeqpacketFamily, address: str, psm: int, timeout_s: float) -> SeqpacketStream:
    """A stream connected to (address, psm) over ``fam`` within ``timeout_s``. Raises OSError, trio.TooSlowError."""
    sock = fam.open_socket()
    try:
        with trio.fail_after(timeout_s):
            await sock.connect(fam.sockaddr(address, psm))
        return SeqpacketStream(sock, fam.mtu(sock))
    except BaseException:
        sock.close()
        raise


def remote_name(fam: SeqpacketFamily, stream: SeqpacketStream) -> str:
    """``bluetooth://ADDR/PSM`` of the other end (as far as the family tells)."""
    try:
        return fam.describe(stream.socket.getpeername())
    except OSError:
        return "bluetooth://?"


async def serve(
    fam: SeqpacketFamily,
    handler: Callable[[SeqpacketStream], Awaitable[None]],
    address: str,
    psm: int,
    *,
    backlog: int = 16,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on (address, psm) and run ``handler`` for each accepted connection until cancelled.

    Reports the bound address (``bluetooth://ADDR/PSM``) through ``task_status``. The handler must
    not raise. Raises OSError when the address cannot be bound.
    """
    sock = fam.open_socket()
    with sock:
        await sock.bind(fam.sockaddr(address, psm))
        sock.listen(backlog)
        task_status.started(fam.describe(sock.getsockname()))
        async with trio.open_nursery() as nursery:
            while True:
                try:
                    conn, _ = await sock.accept()
                except OSError as exc:
                    if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS):
                        log.warning("accept on %s: %s; pausing 0.1 s", fam.describe(sock.getsockname()), exc)
                        await trio.sleep(0.1)
                        continue
                    if exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                        continue
                    raise
                try:
                    stream = SeqpacketStream(conn, fam.mtu(conn))
                except BaseException:
                    conn.close()
                    raise
                nursery.start_soon(handler, stream)
