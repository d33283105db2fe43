"""Physical GPU memory of the server's own processes (NVML, per process, so valid on a shared GPU)
across sleep and wake: level 1 and level 2 free it and a full wake restores it (#11743, #32714,
#47654), a weights-only wake maps back the checkpoint's bytes and no KV cache, and the bytes that stay
resident while asleep are measured per execution mode (graph mode keeps its graph pool, #45648).
"""

from tests.core import expect, measure, memory, oracle, thresholds
from tests.core.memory import checkpoint_tensor_bytes, settled_gpu_bytes
from tools.launcher.config import resolve_model


def _record(recorder, key: str, value, unit: str = "bytes", **extra) -> None:
    recorder.record(measure.current_test(), key, value, unit, **extra)


def _settled(server, recorder, what: str, done=None) -> int:
    return settled_gpu_bytes(server, what, done=done, recorder=recorder)


def _sleep(server, client, recorder, cell, level: int) -> tuple[int, int]:
    """(awake, asleep) bytes around a sleep of `level`."""
    awake = _settled(server, recorder, f"awake, before sleep level {level}")
    client.sleep(level=level)
    expect.asleep(client, level, step=f"sleep level {level}", issue=f"level-{level} memory")
    bound = awake * thresholds.get(f"level{level}_bytes_fraction_max", cell.id)
    asleep = _settled(server, recorder, f"after sleep level {level}", done=lambda b: b <= bound)
    _record(recorder, "awake_bytes", awake)
    _record(recorder, f"level{level}_asleep_bytes", asleep, mode=cell.mode)
    return awake, asleep


def _held_asleep(recorder, cell, level: int, awake: int, asleep: int, why: str) -> None:
    oracle.bounded(
        recorder,
        f"device_bytes.level{level}_asleep",
        asleep / awake,
        cell.id,
        f"bytes held asleep (level {level}) / awake bytes ({asleep} / {awake}; {why})",
    )


class TestPhysicalMemory:
    def test_level1_frees_and_full_wake_restores(self, server, client, golden, recorder, cell):
        awake, asleep = _sleep(server, client, recorder, cell, 1)
        kv = server.config.kv_cache_bytes
        with oracle.together():  # the same two readings, seen from the awake bytes and from the KV cache
            _held_asleep(recorder, cell, 1, awake, asleep, "#11743 freed nothing, #47654")
            oracle.bounded(
                recorder,
                "device_bytes.level1_freed_kv",
                (awake - asleep) / kv,
                cell.id,
                f"bytes freed by level 1 / KV cache bytes ({awake - asleep} / {kv}; #11743)",
            )
        client.wake_up()
        expect.awake(client, step="full wake from level 1", issue="level-1 memory")
        memory.expect_restored(server, recorder, cell.id, awake, "full wake from level 1")
        expect.golden(client, golden, step="level 1 and full wake", issue="level-1 memory")

    def test_level2_frees_and_reload_recovers(self, server, client, golden, recorder, cell):
        awake, asleep = _sleep(server, client, recorder, cell, 2)
        _held_asleep(recorder, cell, 2, awake, asleep, "#32714")
        client.recover_from_level2()
        expect.awake(client, step="level-2 recovery (wake weights, reload, wake kv_cache)", issue="level-2 memory")
        memory.expect_restored(server, recorder, cell.id, awake, "level-2 recovery")
        expect.golden(client, golden, step="level 2 recovery with reload", issue="#29341/#54235 garbage after level 2")

    def test_weights_only_wake_maps_weights_not_kv_cache(self, server, client, golden, recorder, cell):
        weights = checkpoint_tensor_bytes(resolve_model(server.config.model))
        kv = server.config.kv_cache_bytes
        awake = _settled(server, recorder, "awake, before sleep level 1")
        client.sleep(level=1)
        expect.asleep(client, 1, step="sleep level 1", issue="weights-only wake memory")
        asleep = _settled(server, recorder, "after sleep level 1")
        client.wake_up(["weights"])
        expect.partially_asleep(client, step="level 1 then wake weights", issue="#44483")
        weights_only = _settled(server, recorder, "after wake_up(tags=weights)")
        for key, value in (
            ("checkpoint_tensor_bytes", weights),
            ("awake_bytes", awake),
            ("level1_asleep_bytes", asleep),
            ("weights_only_bytes", weights_only),
        ):
            _record(recorder, key, value)
        mapped = weights_only - asleep
        with oracle.together():  # three views of the same three readings
            oracle.bounded(
                recorder,
                "device_bytes.weights_wake_mapped",
                abs(mapped - weights) / weights,
                cell.id,
                f"|bytes mapped by the weights wake - checkpoint tensor bytes| / checkpoint bytes "
                f"(mapped {mapped}, checkpoint {weights})",
            )
            oracle.bounded(
                recorder,
                "device_bytes.weights_wake_kv_unmapped",
                (awake - weights_only) / kv,
                cell.id,
                f"(awake - weights-only bytes) / KV cache bytes ({awake - weights_only} / "
                f"{kv}): the KV cache must stay unmapped until its own wake (#44483)",
            )
            oracle.bounded(
                recorder,
                "device_bytes.weights_wake_fraction",
                weights_only / awake,
                cell.id,
                f"weights-only bytes / awake bytes ({weights_only} / {awake})",
            )
        client.wake_up(["kv_cache"])
        expect.awake(client, step="wake kv_cache after weights", issue="#44483")
        memory.expect_restored(server, recorder, cell.id, awake, "staged wake (weights, kv_cache)")
        expect.golden(client, golden, step="staged wake", issue="#44483/#45619")

    def test_asleep_residue_per_execution_mode(self, server, client, golden, recorder, cell):
        """What stays resident at level 1: CUDA context, non-pool allocations and, in graph mode, the
        CUDA-graph pool, which level 1 does not release (#45648). Bounded per mode, always recorded."""
        awake = _settled(server, recorder, "awake, before sleep level 1")
        client.sleep(level=1)
        expect.asleep(client, 1, step="sleep level 1", issue="asleep residue")
        residue = _settled(server, recorder, "after sleep level 1")
        _record(recorder, "awake_bytes", awake)
        _record(recorder, f"level1_residue_bytes_{cell.mode}", residue, mode=cell.mode)
        oracle.bounded(
            recorder,
            "device_bytes.level1_residue",
            residue,
            cell.id,
            f"bytes resident at level 1 in {cell.mode} mode (graph mode keeps its CUDA-graph pool, #45648)",
        )
        client.wake_up()
        expect.awake(client, step="full wake from level 1", issue="asleep residue")
        memory.expect_restored(server, recorder, cell.id, awake, "full wake from level 1")
        expect.golden(client, golden, step="level 1 and full wake", issue="#45648/#55013")
