"""The launcher's exceptions. Everything that keeps a server from starting is a ServerStartError, so a
fixture can catch one type; the subclasses say which precondition failed."""

# Part of every "no GPU" message, verbatim: it tells whoever reads a failed CPU run what to do.
GPU_CELL_HINT = "this is a GPU cell; run it on a GPU runner with --config=gpu"


class LauncherError(RuntimeError):
    """Base of the launcher's errors."""


class ServerStartError(LauncherError):
    """The server could not be started, or did not come up as asked."""


class ConfigError(ServerStartError):
    """The configuration cannot work (missing model, refused host, unknown runner, ...)."""


class VllmNotFoundError(ServerStartError):
    """The interpreter that would run the server cannot import vLLM."""


class GpuUnavailableError(ServerStartError):
    """No NVIDIA GPU or no NVML in this process."""


class PortConflictError(ServerStartError):
    """Every port tried was already taken."""


class LeaseTimeoutError(ServerStartError):
    """No GPU slot became free in time."""


class ServerReleaseError(LauncherError):
    """The server's processes or GPU memory were still there after teardown."""
