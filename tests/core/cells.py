"""The matrix cell a test runs in: the environment the matrix macro sets, read once, by the launcher's
own reader (ServerConfig.from_env), into the configuration every server of the cell starts from.

The cell's runner and mode are that configuration's, so the id a result is recorded under and the
server it came from cannot disagree. Unset, they are the launcher's defaults (mrv1, eager), as for
`vllm_server` by hand; a value that does not parse is the launcher's ConfigError.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from tests.core import releases, servers
from tools.launcher import door_host
from tools.launcher.config import ServerConfig, resolve_weight_transfer
from tools.matrix import EXECUTION_MODES, RUNNERS, cell_id

# RUNNERS and EXECUTION_MODES: the matrix's vocabulary, which thresholds.py reads from here.
__all__ = ["EXECUTION_MODES", "RUNNERS", "CellSpec", "cell_from_env"]


@dataclasses.dataclass(frozen=True)
class CellSpec:
    config: ServerConfig  # never changed: each server gets its own copy (server_config)
    native_off: str = ""  # why the cell's servers have no weight-transfer backend, where they have none

    @property
    def runner(self) -> str:
        return self.config.runner

    @property
    def mode(self) -> str:
        return self.config.execution_mode

    @property
    def id(self) -> str:
        """pytest id suffix and threshold lookup key, e.g. "MRV1-eager"."""
        return cell_id(self.runner, self.mode)

    @property
    def door(self) -> str:
        """The front door the cell drives vLLM through (tools/matrix.bzl FRONT_DOORS)."""
        return self.config.front_door

    def server_config(self, log_dir: str) -> ServerConfig:
        """What one server of the cell starts with: a copy of the cell's configuration, its log under
        log_dir."""
        return dataclasses.replace(self.config, log_dir=log_dir)


def cell_from_env(environ: Mapping[str, str] = os.environ) -> CellSpec:
    """The cell of this test process; ConfigError (tools/launcher/errors.py) names a variable that does
    not parse."""
    config = ServerConfig.from_env(environ=environ)
    # weight_transfer auto (a class's setting, tools/matrix.bzl CLASS_SERVER_SETTINGS) by the vLLM the
    # toolchain's identity names: a server of a release without the API would not start with it.
    installed = releases.from_identity(servers.identity(environ))
    backend, off = resolve_weight_transfer(config.weight_transfer, installed and releases.public(installed))
    return CellSpec(dataclasses.replace(config, weight_transfer=backend), native_off=off)


def door_cannot(cell: CellSpec, capability: str) -> str | None:
    """Why the cell's front door cannot provide capability (door_host.CANNOT), or None if it can."""
    if capability not in {c for door in door_host.CANNOT.values() for c in door}:
        raise ValueError(f"door_needs({capability!r}): no door declares it; the capabilities are door_host.CANNOT's")
    return door_host.cannot(cell.door, capability)
