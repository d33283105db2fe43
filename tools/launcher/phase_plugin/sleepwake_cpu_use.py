"""How a server's processes use the runner's CPU: torch's intra-op threads, and how CUDA waits for the
GPU. A vLLM general plugin, like sleepwake_memory_phase, loaded in each of the server's processes.

Why: on one H200 with 16 cores the matrix's servers' CPU work is its floor (docs/design.md).
Two defaults may spend cores on nothing there:
  * torch sizes its thread pool by the cores (16) in every process, and an OpenMP thread spins for a
    while after each parallel region before it sleeps;
  * a process with fewer CUDA contexts than cores spins a core while it waits for the GPU (CUDA's
    cudaDeviceScheduleAuto), in every synchronisation of every decode step.
Both are settings of the launcher (--torch_threads, --cuda_sync), by default one thread and a blocking
wait, which cut the servers' CPU time and the matrix's, every cell green (docs/design.md).
"""

import ctypes
import json
import os
import sys

if __package__:  # imported by the launcher, as tools.launcher.phase_plugin.*
    from .sleepwake_on_import import patch_when_imported
else:  # loaded by vLLM from its entry point, this folder on the server's PYTHONPATH
    # (the type check reads the package's copy above; this name resolves only on the server's path)
    from sleepwake_on_import import patch_when_imported  # type: ignore[import-not-found,no-redef]

ENV_TORCH_THREADS = "SLEEPWAKE_TORCH_THREADS"
ENV_CUDA_SYNC = "SLEEPWAKE_CUDA_SYNC"
# CUDA's CU_CTX_SCHED_* flags (cuda.h), by the launcher's names for them.
CUDA_SYNC_FLAGS = {"auto": 0x0, "spin": 0x1, "yield": 0x2, "blocking": 0x4}
MARK = "sleepwake-cpu-use "
TARGET = "vllm.v1.worker.gpu_worker"
_WRAPPED = "__sleepwake_cpu_use__"


def _mark(record: dict) -> None:
    print(MARK + json.dumps(record), file=sys.stderr, flush=True)


def set_torch_threads(threads: int, torch_module=None) -> None:
    """torch.set_num_threads in this process: a forked server inherits the zygote's pool size, which
    OMP_NUM_THREADS cannot change after torch loaded."""
    if torch_module is None:
        import torch

        torch_module = torch
    torch_module.set_num_threads(threads)
    _mark({"torch_threads": torch_module.get_num_threads(), "pid": os.getpid()})


def set_cuda_sync(flag: int, driver) -> list | None:
    """Sets every visible device's primary-context scheduling flag before this process creates its
    context (cuDevicePrimaryCtxSetFlags, through driver: libcuda); returns the devices' handles, or None,
    with a MARK line saying which call the driver refused, when it could not: the server then runs with
    CUDA's default, which is slower to share, not wrong."""
    devices = []

    def ok(what, result):
        if result != 0:
            _mark({"cuda_sync": flag, "refused": what, "result": result, "pid": os.getpid()})
        return result == 0

    count = ctypes.c_int(0)
    if not (ok("cuInit", driver.cuInit(0)) and ok("cuDeviceGetCount", driver.cuDeviceGetCount(ctypes.byref(count)))):
        return None
    for ordinal in range(count.value):
        device = ctypes.c_int(0)
        if not (
            ok("cuDeviceGet", driver.cuDeviceGet(ctypes.byref(device), ordinal))
            and ok("cuDevicePrimaryCtxSetFlags", driver.cuDevicePrimaryCtxSetFlags(device, flag))
        ):
            return None
        devices.append(device)
    return devices


def applied_flags(devices, driver) -> list[dict]:
    """Each device's primary context as the driver reports it (cuDevicePrimaryCtxGetState): its
    scheduling flag and whether it is active, to show the flag held once the worker made its context."""
    states = []
    for device in devices:
        flags, active = ctypes.c_uint(0), ctypes.c_int(0)
        driver.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(active))
        states.append({"sched": flags.value & 0x7, "active": bool(active.value)})
    return states


def wrap_init_device(owner, flag: int, driver=None) -> None:
    """Makes owner.init_device (the worker's first step, which creates the CUDA context) set the
    scheduling flag first, and log what the context has after it; only the engine core, which imports
    the worker, ever touches CUDA here."""
    original = owner.init_device
    if getattr(original, _WRAPPED, False):
        return

    def init_device(self, *args, **kwargs):
        drv, devices = driver, None
        try:
            drv = drv if drv is not None else ctypes.CDLL("libcuda.so.1")
        except OSError as e:  # no CUDA driver here: the worker's own init_device says what that means
            _mark({"cuda_sync": flag, "refused": "libcuda.so.1", "error": str(e), "pid": os.getpid()})
        else:
            devices = set_cuda_sync(flag, drv)
        result = original(self, *args, **kwargs)
        if devices is not None:
            _mark({"cuda_sync": flag, "devices": applied_flags(devices, drv), "pid": os.getpid()})
        return result

    setattr(init_device, _WRAPPED, True)
    init_device.__name__ = "init_device"
    owner.init_device = init_device


def register() -> None:
    """The vllm.general_plugins entry point."""
    threads = int(os.environ.get(ENV_TORCH_THREADS) or 0)
    if threads > 0:
        set_torch_threads(threads)
    sync = os.environ.get(ENV_CUDA_SYNC) or "auto"
    if sync != "auto":
        flag = CUDA_SYNC_FLAGS[sync]
        patch_when_imported(TARGET, lambda module: wrap_init_device(module.Worker, flag), key=__name__)
