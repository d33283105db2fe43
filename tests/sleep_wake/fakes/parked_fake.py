"""The fake tier's server with the launcher's parking (tools/launcher/parking.py) played within one
process, so that the fixtures' parked path (conftest.py: park a passing class's server with its fresh
readings as JSON, claim one at a start, judge its reset, start fresh on a refusal) runs on CPU.

What it keeps of the launcher's contract: park() hands the started server over with the suite's note,
which travels as JSON; a start whose config says claim takes over the oldest server parked under the
same configuration (tests/core/server_reuse.py key_of) and reports the note as `borrowed`; one never claimed is stopped
when the process exits. What it leaves out is the transport (pipes, slot locks, another process), which
//tools/launcher/unit:parking_test covers with stub servers.
"""

from __future__ import annotations

import atexit
import json
from typing import TYPE_CHECKING

from tests.core import server_reuse
from tests.sleep_wake.fakes import fake_server
from tools.launcher.config import ServerConfig

if TYPE_CHECKING:
    from tools.launcher.interface import Server, ServerFactory

_PARKED: dict[str, list] = {}  # key -> [(server, note as JSON)], oldest first


class VllmServer(fake_server.VllmServer):
    """fake_server.VllmServer that can be given back and taken over within this process."""

    _note: dict | None = None

    @property
    def borrowed(self) -> dict | None:
        return self._note

    def park(self, suite: dict) -> str | None:
        _PARKED.setdefault(server_reuse.key_of(self.config), []).append((self, json.dumps(suite)))
        return f"parked in this process under {self.url}"

    def start(self) -> None:
        waiting = _PARKED.get(server_reuse.key_of(self.config)) if self.config.claim else None
        if not waiting:
            self._note = None
            super().start()
            return
        giver, note = waiting.pop(0)
        # The running fake, its host-memory child and its log move to this object; the giver holds none.
        for name in ("_fake", "_host", "_port", "command", "log_path", "start_mode"):
            setattr(self, name, getattr(giver, name))
        giver._fake = giver._host = None
        self._note = json.loads(note)


@atexit.register
def _stop_unclaimed() -> None:
    for waiting in _PARKED.values():
        for server, _ in waiting:
            server.stop()
    _PARKED.clear()


if TYPE_CHECKING:  # the interface the suite makes and uses its servers through; mypy (//tools/lint:types_test)
    _factory: ServerFactory = VllmServer
    _server: Server = VllmServer(ServerConfig())


Trainer = fake_server.Trainer  # the fake's trainer beside these servers too (tests/core/servers.py trainer_class)
