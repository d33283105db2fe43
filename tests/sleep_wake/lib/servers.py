"""Which server class the suite starts, and the vLLM build it must serve: shared by the fixtures
(conftest.py) and the golden action (tests/sleep_wake/goldens/take_golden.py), which start servers the
same way."""

import importlib
import os

SERVER_MODULE_ENV = "SLEEPWAKE_SERVER_MODULE"
DEFAULT_SERVER_MODULE = "tools.launcher.server"
IDENTITY_ENV = "SLEEPWAKE_VLLM_IDENTITY"


class ServerModuleError(Exception):
    """SLEEPWAKE_SERVER_MODULE names no module with a VllmServer."""


def server_class(environ=os.environ):
    """VllmServer of the module SLEEPWAKE_SERVER_MODULE names: the one seam between the suite and
    the server it runs against (the fake tier names tests.sleep_wake.fakes.fake_server)."""
    name = environ.get(SERVER_MODULE_ENV) or DEFAULT_SERVER_MODULE
    try:
        return importlib.import_module(name).VllmServer
    except (ImportError, AttributeError) as e:
        raise ServerModuleError(f"{SERVER_MODULE_ENV}={name!r} does not provide VllmServer ({e}); leave it "
                                f"unset for {DEFAULT_SERVER_MODULE} or name a module with the same surface")


def identity(environ=os.environ) -> str | None:
    """The vLLM build / GPU description the matrix passes as a runfile (a cache-key input)."""
    path = environ.get(IDENTITY_ENV)
    if not path or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.read().strip()
