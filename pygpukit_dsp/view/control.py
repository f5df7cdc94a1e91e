"""The control socket between a stream process and its view's server process: length-prefixed JSON
messages over a Unix stream socket, a message that opens a sink carrying its ring's descriptor.

Messages to the server: ``config`` (first: address, token, title, the sinks' names), ``open`` (a
sink's name, spec, parameters and ring layout, with the ring's descriptor), ``health`` (the panel's
figures), ``ended`` and ``stop``. From the server: ``listening`` (the port) or ``error`` (why it
cannot listen). The end of the socket ends the server: it never outlives its stream process.
"""

from __future__ import annotations

import json
import socket
import struct
from collections import deque
from typing import Any

_LEN = struct.Struct("<I")
MAX_FDS = 16  # descriptors taken with one read at most


def send(sock: socket.socket, message: dict[str, Any], fd: int | None = None) -> None:
    """Send one message (and ``fd`` with its first byte); waits while the socket is full."""
    body = json.dumps(message, separators=(",", ":"), default=_plain).encode()
    data = _LEN.pack(len(body)) + body
    if fd is not None:
        sent = socket.send_fds(sock, [data], [fd])
        data = data[sent:]
    if data:
        sock.sendall(data)


def _plain(value: Any) -> Any:
    """A NumPy scalar or array in a message as the plain value."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


class Receiver:
    """Reads messages (and the descriptors that came with them) from a socket, in order."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buf = bytearray()
        self._fds: deque[int] = deque()

    def next(self) -> tuple[dict[str, Any], int | None] | None:
        """The next message and its descriptor (``open`` messages carry one); None at the socket's end."""
        while True:
            if len(self._buf) >= _LEN.size:
                (n,) = _LEN.unpack_from(self._buf)
                if len(self._buf) >= _LEN.size + n:
                    body = bytes(self._buf[_LEN.size:_LEN.size + n])
                    del self._buf[:_LEN.size + n]
                    message = json.loads(body)
                    fd = self._fds.popleft() if message.get("type") == "open" and self._fds else None
                    return message, fd
            data, fds, _flags, _addr = socket.recv_fds(self.sock, 1 << 16, MAX_FDS)
            if not data:
                return None
            self._buf += data
            self._fds.extend(fds)
