"""Messages over Unix stream sockets, between the launcher, the zygote host and the zygotes.

A message is one JSON object, length-prefixed, with up to MAX_FDS file descriptors riding along
(SCM_RIGHTS): how a test process hands the zygote's forked supervisor its pipes, log and GPU lease.
Only peers of this process's uid are served (peer_uid): a zygote forks servers with the environment
a request names, so another local user must not be able to ask.
"""

from __future__ import annotations

import array
import json
import os
import select
import socket
import struct
import time

MAX_MESSAGE = 4 << 20  # a server's environment and argv are a few KiB; this bounds a corrupt length
MAX_FDS = 8
# sockaddr_un holds 108 bytes; longer paths (Bazel's TEST_TMPDIR) are reached through the
# directory's /proc/self/fd entry instead.
_SUN_PATH_MAX = 100
_HEADER = struct.Struct("!I")


class ProtocolError(OSError):
    """The peer closed early, timed out, or sent something that is not a message."""


def _with_short_path(path: str, action) -> None:
    if len(path) <= _SUN_PATH_MAX:
        action(path)
        return
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_PATH)
    try:
        action("/proc/self/fd/%d/%s" % (dir_fd, os.path.basename(path)))
    finally:
        os.close(dir_fd)


def listen(path: str, backlog: int = 64) -> socket.socket:
    """A listening socket at path (a stale file there is replaced)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    _with_short_path(path, sock.bind)
    sock.listen(backlog)
    return sock


def connect(path: str, timeout_s: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        _with_short_path(path, sock.connect)
    except OSError:
        sock.close()
        raise
    return sock


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def send(sock: socket.socket, message: dict, fds=()) -> None:
    data = json.dumps(message).encode()
    frame = _HEADER.pack(len(data)) + data
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sent = sock.sendmsg([frame], ancillary)
    if sent < len(frame):
        sock.sendall(frame[sent:])  # the descriptors went with the first bytes


def recv(sock: socket.socket, timeout_s: float) -> tuple[dict, list[int]]:
    """One message and the descriptors that came with it (the caller owns and closes them)."""
    deadline = time.monotonic() + timeout_s
    fds: list[int] = []
    data = b""

    def wait_readable():
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([sock], [], [], left)[0]:
            raise ProtocolError("no message from the peer within %.1f s" % timeout_s)

    try:
        while len(data) < _HEADER.size or len(data) < _HEADER.size + _HEADER.unpack_from(data)[0]:
            if len(data) >= _HEADER.size and _HEADER.unpack_from(data)[0] > MAX_MESSAGE:
                raise ProtocolError(
                    "message of %d bytes announced; at most %d" % (_HEADER.unpack_from(data)[0], MAX_MESSAGE)
                )
            wait_readable()
            chunk, new_fds, _, _ = socket.recv_fds(sock, 65536, MAX_FDS)
            fds.extend(new_fds)
            if not chunk:
                raise ProtocolError("the peer closed the connection after %d bytes" % len(data))
            data += chunk
        length = _HEADER.unpack_from(data)[0]
        try:
            message = json.loads(data[_HEADER.size : _HEADER.size + length])
        except ValueError as e:
            raise ProtocolError("the message is not JSON: %s" % e) from None
        if not isinstance(message, dict):
            raise ProtocolError("a message must be a JSON object, got %s" % type(message).__name__)
        return message, fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
