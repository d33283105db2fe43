"""TCP ports for the server: pick a free one, recognise a bind conflict in the server's log."""

from __future__ import annotations

import socket

# What a failed bind prints: vLLM's own socket (OSError [Errno 98]), uvicorn, and torch.distributed's
# store on the engine's internal port, which vLLM picks free and another server can take first (seen
# on the H200 with 32 servers starting at once: "DistNetworkError ... EADDRINUSE").
BIND_CONFLICT_MARKERS = ("address already in use", "[errno 98]", "eaddrinuse")


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago. Another process can still take it: callers retry."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def is_bind_conflict(log_text: str) -> bool:
    text = log_text.lower()
    return any(marker in text for marker in BIND_CONFLICT_MARKERS)


def url(host: str, port: int) -> str:
    return "http://%s:%d" % ("[%s]" % host if ":" in host else host, port)
