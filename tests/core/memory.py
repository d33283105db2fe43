"""Physical GPU memory of a server as NVML sees it, and the checkpoint bytes it should hold."""

import glob
import math
import os

from tests.core import liveness, measure, oracle, thresholds

MiB = 1 << 20
# Two NVML readings one poll apart that differ by less than this count as settled: cuMem maps and
# unmaps in 2 MiB granules, so anything smaller is not a change of the pools.
SETTLE_BYTES = 2 * MiB


def settled_gpu_bytes(server, what: str, done=None, recorder=None) -> int:
    """server.gpu_bytes() once `done(bytes)` holds or the last three readings (spanning at least one
    poll) agree within SETTLE_BYTES; the seconds that took go to `recorder` (memory_settle_s).

    NVML's per-process numbers can trail an unmap or map by a moment, so one reading right after a
    sleep or wake may be stale. Bounded by the memory_settle_s_max threshold.
    """
    readings = [server.gpu_bytes()]

    def settled():
        readings.append(server.gpu_bytes())
        last3 = readings[-3:]
        return (done is not None and done(readings[-1])) or (len(last3) == 3 and max(last3) - min(last3) < SETTLE_BYTES)

    def measured(why: str) -> None:
        """Before device_bytes.settles may fail: the window held the readings a settle compares (a host that
        stalled this process took fewer: no measurement, no answer) and the server is live."""
        if len(readings) < 3:
            raise liveness.NoAnswer(
                f"{why}: only {len(readings)} NVML reading(s) in the window, fewer than the 3 a settle compares: "
                "the host stalled this process, so the bytes were never measured; run the cell on a quieter host",
                liveness=None,
            )
        liveness.confirm(server.url, thresholds.get("request_completion_s_max"), why)

    seconds = measure.wait_until(
        settled,
        thresholds.get("memory_settle_s_max"),
        poll_s=thresholds.get("memory_settle_poll_s"),
        what=f"NVML bytes of the server to settle {what} (readings {readings[-6:]})",
        oracle_id="device_bytes.settles",
        confirm_live=measured,
    )
    if recorder is not None:
        recorder.record("", "memory_settle_s", seconds, "s", what=what, readings=len(readings))
    if readings[-1] <= 0:
        raise oracle.Precondition(
            f"NVML reports 0 bytes for the server's PIDs {server.pids()} {what}: NVML does not see "
            "these processes (a PID namespace other than the host's?), so per-process memory cannot "
            "be measured here; run the cell on a host or container sharing the host's PID namespace"
        )
    return readings[-1]


# Bytes per element of the safetensors dtypes a checkpoint may hold (safetensors' own names).
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


def checkpoint_tensors(model_dir: str) -> dict[str, int]:
    """Tensor name -> bytes over the checkpoint's *.safetensors files, from their headers (safe_open maps
    nothing but the header until a tensor is read)."""
    from safetensors import safe_open  # vLLM's own dependency: every runner's Python has it

    paths = sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
    if not paths:
        raise oracle.Precondition(
            f"no *.safetensors in {model_dir!r}: the weights-only wake is compared with the served "
            "checkpoint's tensor bytes, so the model must be a local checkpoint directory"
        )
    tensors = {}
    for path in paths:
        with safe_open(path, framework="numpy") as f:
            for name in f.keys():
                piece = f.get_slice(name)
                tensors[name] = math.prod(piece.get_shape()) * DTYPE_BYTES[piece.get_dtype()]
    return tensors


def checkpoint_tensor_bytes(model_dir: str) -> int:
    """Sum of the tensor bytes of the checkpoint's *.safetensors files, read from their headers."""
    return sum(checkpoint_tensors(model_dir).values())


def expect_restored(server, recorder, cell_id: str, awake: int, step: str) -> int:
    """After a full wake the server holds its awake bytes again; returns the woken bytes.

    Two one-sided bounds, since the two directions mean different things: more than before is a
    leak (#21336); less than before by more than the allocator's cache means a pool was not mapped
    back (#32714). Eager mode legitimately comes back lower: sleep empties torch's caching allocator,
    whose cached activation blocks are not re-reserved until a forward needs them.
    """
    grow_max = thresholds.get("wake_restore_bytes_max", cell_id)
    short_max = thresholds.get("wake_shortfall_bytes_max", cell_id)
    woken = settled_gpu_bytes(
        server, f"after {step}", done=lambda b: -short_max <= b - awake <= grow_max, recorder=recorder
    )
    recorder.record(measure.current_test(), "woken_bytes", woken, "bytes", step=step, awake=awake)
    with oracle.together():
        oracle.bounded(
            recorder,
            "device_bytes.wake_growth",
            woken - awake,
            cell_id,
            f"bytes after {step} minus awake bytes (awake {awake}, woken {woken}; growth is a leak, #21336)",
        )
        oracle.bounded(
            recorder,
            "device_bytes.wake_shortfall",
            awake - woken,
            cell_id,
            f"awake bytes minus bytes after {step} (awake {awake}, woken {woken}; a pool not mapped back, #32714)",
        )
    return woken
