"""Host memory of the server's process tree (VmRSS, tests/core/host_memory.py) across sleep levels: level 1
holds a host copy of the weights while asleep (CuMemAllocator.sleep copies the weights pool to pinned
host memory), level 2 holds none (what sets it apart from level 1 when host RAM is what the trainer
needs back), and over ten level-1 cycles host memory stays flat (each sleep reuses the pinned blocks of
the last one). What stays after the wake is pinned as a known divergence."""

from tests.core import expect, host_memory, measure, oracle, server_log, thresholds
from tests.core.memory import checkpoint_tensor_bytes
from tools.launcher.config import resolve_model

ISSUE = "host memory"
CYCLES = 10


def _host(server, recorder, key: str, **extra) -> host_memory.HostMemory:
    """The server tree's host memory now, recorded with its breakdown and per-process numbers."""
    total, per_pid = host_memory.server_host_memory(server)
    recorder.record(
        measure.current_test(),
        key,
        total.rss,
        "bytes",
        pinned=total.pinned,
        breakdown=total.as_dict(),
        per_pid={pid: m.as_dict() for pid, m in per_pid.items()},
        **extra,
    )
    return total


def _sleep(client, level: int, step: str) -> None:
    client.sleep(level=level)
    expect.asleep(client, level, step=step, issue=ISSUE)


def _expect_no_host_copy_yet(server) -> None:
    """A new host copy shows in host bytes only while PyTorch's caching host allocator holds no pinned
    blocks from an earlier one (they stay after the wake and are reused: known divergence
    host_copy_cached_after_wake). So the level tests run on a server that has not backed weights up yet:
    level 2 first (it pins nothing), then level 1."""
    logged = server_log.allocator_sleeps(server_log.read(server.log_path))
    earlier = [s for s in logged if s.backed_up_bytes]
    if earlier:
        raise oracle.Precondition(
            f"this server already copied its weights to host memory at an earlier sleep ({earlier}), and "
            "PyTorch's caching host allocator keeps those pinned blocks, so a new copy would not show. Run "
            "this test on a server that has not slept at level 1 (the class's order: level 2, level 1, "
            "cycles)"
        )


class TestHostMemory:
    FRESH_SERVER = "the first sleep's host copy, on a server that has never slept (tests/core/server_reuse.py)"

    def test_level2_holds_no_host_copy(self, server, client, golden, recorder, cell):
        _expect_no_host_copy_yet(server)
        awake = _host(server, recorder, "host_awake_bytes")
        _sleep(client, 2, "sleep level 2")
        asleep = _host(server, recorder, "host_level2_asleep_bytes")
        oracle.bounded(
            recorder,
            "host_bytes.level2_asleep",
            asleep.rss - awake.rss,
            cell.id,
            f"[{ISSUE}] host bytes added by a level-2 sleep, which discards the weights "
            f"(breakdown of the change {(asleep - awake).as_dict()})",
        )
        client.recover_from_level2()
        expect.awake(client, step="level-2 recovery", issue=ISSUE)
        expect.golden(client, golden, step="level 2 recovery with reload", issue=ISSUE)

    def test_level1_holds_a_host_copy_of_the_weights(self, server, client, golden, recorder, cell):
        _expect_no_host_copy_yet(server)
        weights = checkpoint_tensor_bytes(resolve_model(server.config.model))
        awake = _host(server, recorder, "host_awake_bytes")
        _sleep(client, 1, "sleep level 1")
        asleep = _host(server, recorder, "host_level1_asleep_bytes")
        logged = server_log.allocator_sleeps(server_log.read(server.log_path))
        copy = asleep.rss - awake.rss
        recorder.record(
            measure.current_test(),
            "host_copy_bytes",
            copy,
            "bytes",
            pinned=asleep.pinned - awake.pinned,
            checkpoint_tensor_bytes=weights,
            vllm_backed_up_bytes=logged[-1].backed_up_bytes if logged else None,
        )
        what = (
            f"[{ISSUE}] host bytes added by the first level-1 sleep / checkpoint tensor bytes ({copy} / "
            f"{weights}; breakdown of the change {(asleep - awake).as_dict()})"
        )
        with oracle.together():
            oracle.bounded(recorder, "host_bytes.level1_copy_min", copy / weights, cell.id, what)
            oracle.bounded(recorder, "host_bytes.level1_copy_max", copy / weights, cell.id, what)

        client.wake_up()
        expect.awake(client, step="full wake from level 1", issue=ISSUE)
        woken = _host(server, recorder, "host_woken_bytes")
        pin = thresholds.divergence("host_copy_cached_after_wake", client.version())
        seen = host_memory.retention(woken.rss - awake.rss, copy, thresholds.get("level2_host_bytes_max"))
        oracle.equal(
            "host_bytes.retained_after_wake",
            seen,
            pin.expected,
            f"[{ISSUE}] after the wake the server holds {woken.rss - awake.rss} host bytes more than "
            f"before the sleep (the copy was {copy}), {pin.describe()}",
        )
        expect.golden(client, golden, step="level 1 and full wake", issue=ISSUE)

    def test_host_bytes_flat_over_ten_cycles(self, server, client, golden, recorder, cell):
        series: dict[str, list[int]] = {"asleep": [], "awake": []}
        prompts = list(golden)
        for cycle in range(1, CYCLES + 1):
            _sleep(client, 1, f"cycle {cycle}: sleep level 1")
            # What the server allocated, not its file-backed pages, which the page cache moves on its own.
            series["asleep"].append(_host(server, recorder, "host_asleep_bytes", cycle=cycle).allocated)
            client.wake_up()
            expect.awake(client, step=f"cycle {cycle}: full wake", issue=ISSUE)
            series["awake"].append(_host(server, recorder, "host_awake_bytes", cycle=cycle).allocated)
            prompt = prompts[cycle % len(prompts)]
            expect.tokens(client.complete(prompt), golden[prompt], prompt=prompt, step=f"cycle {cycle}", issue=ISSUE)
        # From cycle 2: the first level-1 sleep of a server pins its copy (test_level1_holds_a_host_copy...).
        with oracle.together():
            for state, values in series.items():
                oracle.bounded(
                    recorder,
                    "host_bytes.leak_per_cycle",
                    measure.median_increment(values[1:]),
                    cell.id,
                    f"[{ISSUE}] median growth per cycle of {state} allocated host bytes"
                    f" over cycles 2..{CYCLES}: {values}",
                )
            for state, values in series.items():
                oracle.bounded(
                    recorder,
                    "host_bytes.cycle_spread",
                    measure.spread(values[1:]),
                    cell.id,
                    f"[{ISSUE}] max - min of {state} allocated host bytes over cycles 2..{CYCLES}: {values}",
                )
