"""TCP ports for the server: reserve a free one, see who listens on it, recognise a bind conflict in the
server's log."""

from __future__ import annotations

import socket

import psutil

# What a failed bind prints: vLLM's own socket (OSError [Errno 98]), uvicorn, and torch.distributed's
# store on the engine's internal port, which vLLM picks free and another server can take first (seen
# on the H200 with 32 servers starting at once: "DistNetworkError ... EADDRINUSE").
BIND_CONFLICT_MARKERS = ("address already in use", "[errno 98]", "eaddrinuse")


class Reservation:
    """A port held bound, never listening, with SO_REUSEADDR, from before the server is launched until it
    listens. Why: a port picked free and let go can be picked again by a neighbour's launcher before
    either server binds it. vLLM binds its socket with SO_REUSEADDR long before it listens (setup_server,
    then the engine's start-up), and Linux lets two such sockets share a port while neither listens; the
    first to listen takes it, and the other launcher's GET /health is answered by the neighbour (seen on
    the H200 at 24 servers per GPU: /health 200 while the worker was still capturing graphs). While the
    reservation is bound, a neighbour's bind to port 0 is never given this port, and vLLM's own bind
    still succeeds."""

    def __init__(self, host: str):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self.port = self._sock.getsockname()[1]

    def close(self) -> None:
        self._sock.close()


def listening_pids(pids, port: int) -> set[int]:
    """The processes among pids with a TCP socket listening on port: whose server answers there."""
    out = set()
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            # net_connections since psutil 6.0; connections before
            conns = (proc.net_connections if hasattr(proc, "net_connections") else proc.connections)(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns):
            out.add(pid)
    return out


def is_bind_conflict(log_text: str) -> bool:
    text = log_text.lower()
    return any(marker in text for marker in BIND_CONFLICT_MARKERS)


def url(host: str, port: int) -> str:
    return "http://%s:%d" % ("[%s]" % host if ":" in host else host, port)
