"""The ordered record of what crossed the engine's boundaries: worker RPCs, forward passes, outputs.

The fake worker and the recording output queue append to one Timeline, so a test can state an order
("the last forward pass came before the sleep RPC", "the abort output was sent before the offload")
instead of only a final state.
"""

from __future__ import annotations

import dataclasses
import threading


@dataclasses.dataclass(frozen=True)
class Event:
    kind: str  # "sleep", "wake_up", "forward", "output", "reload_weights"
    detail: tuple = ()  # sleep: (level,); wake_up: tags; forward: request ids; output: (id, reason)


class Timeline:
    """Append-only and thread-safe: the engine's busy loop and the test thread both write to it."""

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._lock = threading.Lock()

    def add(self, kind: str, *detail) -> None:
        with self._lock:
            self._events.append(Event(kind, tuple(detail)))

    @property
    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    def index(self, kind: str, last: bool = False) -> int:
        """Position of the first (or last) event of a kind; -1 if there is none."""
        positions = [i for i, e in enumerate(self.events) if e.kind == kind]
        if not positions:
            return -1
        return positions[-1] if last else positions[0]

    def forwarded(self, request_id: str) -> bool:
        return any(request_id in e.detail for e in self.of("forward"))

    def __str__(self) -> str:
        return ", ".join(f"{e.kind}{list(e.detail)}" for e in self.events) or "(nothing happened)"
