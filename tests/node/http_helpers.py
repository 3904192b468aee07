"""Reading raw HTTP/1.1 responses off a socket, for the tests of the node's HTTP servers."""

from __future__ import annotations

import trio


async def read_response(stream: trio.SocketStream, buf: bytearray) -> bytes:
    """One HTTP/1.1 response with a Content-Length body, or b"" when the server closed first. ``buf`` keeps what
    was read past it (the next response on a kept-alive connection)."""
    while b"\r\n\r\n" not in buf:
        chunk = await stream.receive_some(4096)
        if not chunk:
            return b""
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(rest) < length:
        chunk = await stream.receive_some(4096)
        if not chunk:
            return b""
        rest += chunk
    buf[:] = rest[length:]
    return head + b"\r\n\r\n" + rest[:length]
