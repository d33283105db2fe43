"""Which server class the suite starts, and the vLLM build it must serve: shared by the fixtures
(conftest.py) and the golden action (tests/sleep_wake/goldens/take_golden.py), which start servers the
same way."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import cast

from tools.launcher.interface import ServerFactory

SERVER_MODULE_ENV = "SLEEPWAKE_SERVER_MODULE"
DEFAULT_SERVER_MODULE = "tools.launcher.server"
IDENTITY_ENV = "SLEEPWAKE_VLLM_IDENTITY"


class ServerModuleError(Exception):
    """SLEEPWAKE_SERVER_MODULE names no module with a VllmServer."""


def server_class(environ: Mapping[str, str] = os.environ) -> ServerFactory:
    """VllmServer of the module SLEEPWAKE_SERVER_MODULE names: the one seam between the suite and
    the server it runs against (the fake tier names tests.sleep_wake.fakes.fake_server). Both servers
    implement tools/launcher/interface.py, which mypy checks; a module named here is taken at its word."""
    name = environ.get(SERVER_MODULE_ENV) or DEFAULT_SERVER_MODULE
    try:
        return cast(ServerFactory, importlib.import_module(name).VllmServer)
    except (ImportError, AttributeError) as e:
        raise ServerModuleError(
            f"{SERVER_MODULE_ENV}={name!r} does not provide VllmServer ({e}); leave it "
            f"unset for {DEFAULT_SERVER_MODULE} or name a module whose VllmServer implements "
            "tools/launcher/interface.py"
        ) from None


def trainer_class(environ: Mapping[str, str] = os.environ):
    """The RL trainer beside the server (lib/trainer.py Trainer): the `Trainer` of the module
    SLEEPWAKE_SERVER_MODULE names when it has one (the fake tier's, which has no GPU), else the trainer
    process that holds tensors on the GPU."""
    name = environ.get(SERVER_MODULE_ENV) or DEFAULT_SERVER_MODULE
    trainer = getattr(importlib.import_module(name), "Trainer", None)
    if trainer is not None:
        return trainer
    from tests.core.trainer import TrainerProcess

    return TrainerProcess


def identity(environ: Mapping[str, str] = os.environ) -> str | None:
    """The vLLM build / GPU description the matrix passes as a runfile (a cache-key input)."""
    path = environ.get(IDENTITY_ENV)
    if not path or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.read().strip()
