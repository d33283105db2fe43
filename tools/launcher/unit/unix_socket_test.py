"""Messages with descriptors over a Unix socket, including paths longer than sockaddr_un holds."""

import os
import socket
import struct
import threading

import pytest

from tools.launcher import unix_socket


def _pair_through(path):
    listener = unix_socket.listen(path)
    accepted = []
    thread = threading.Thread(target=lambda: accepted.append(listener.accept()[0]))
    thread.start()
    client = unix_socket.connect(path, 5)
    thread.join(5)
    listener.close()
    return client, accepted[0]


@pytest.mark.parametrize("depth", [1, 12])  # 12 levels of 10 characters: beyond the 108-byte limit
def test_a_message_and_its_descriptors_arrive_whole(tmp_path, depth):
    directory = os.path.join(str(tmp_path), *["d" * 10] * depth)
    os.makedirs(directory)
    client, server = _pair_through(os.path.join(directory, "x.sock"))
    read_end, write_end = os.pipe()
    big = {"env": {"K%d" % i: "v" * 100 for i in range(2000)}}  # ~250 KB: several socket reads
    with client, server:
        sender = threading.Thread(target=unix_socket.send, args=(client, big, [write_end]))
        sender.start()
        message, fds = unix_socket.recv(server, 5)
        sender.join(5)
        assert message == big and len(fds) == 1
        assert unix_socket.peer_uid(server) == os.getuid()
    os.write(fds[0], b"through the passed descriptor")
    os.close(fds[0])
    os.close(write_end)
    assert os.read(read_end, 100) == b"through the passed descriptor"
    os.close(read_end)


@pytest.mark.parametrize(
    "frame,error",
    [
        (b"", "closed the connection after 0 bytes"),
        (struct.pack("!I", 10) + b"{}", "closed the connection after 6 bytes"),
        (struct.pack("!I", 5) + b"nope!", "not JSON"),
        (struct.pack("!I", 2) + b"[]", "must be a JSON object"),
        (struct.pack("!I", unix_socket.MAX_MESSAGE + 1), "announced"),
    ],
)
def test_a_broken_peer_is_a_protocol_error(tmp_path, frame, error):
    client, server = _pair_through(str(tmp_path / "x.sock"))
    with client, server:
        client.sendall(frame)
        client.shutdown(socket.SHUT_WR)
        with pytest.raises(unix_socket.ProtocolError, match=error):
            unix_socket.recv(server, 5)


def test_a_silent_peer_times_out(tmp_path):
    client, server = _pair_through(str(tmp_path / "x.sock"))
    with client, server, pytest.raises(unix_socket.ProtocolError, match="within 0.2 s"):
        unix_socket.recv(server, 0.2)
