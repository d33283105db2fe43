"""Release and restore are done when the response returns: the first memory reading after /sleep answers
already shows the memory released, the first after /wake_up shows it back, and a request sent the moment
/wake_up answers is golden. No reading here waits or polls for a value to settle, so a release or a
restore that lands after the response fails instead of being waited for.

The reading: the device's used bytes (NVML nvmlDeviceGetMemoryInfo, VllmServer.device_used_bytes), taken
inside the GPU's exclusive memory phase (client.sleep_window(exclusive=True)), where no neighbour on the GPU may
start, wake, reload, sleep or stop. It is current as soon as the driver unmaps or maps (it is the figure vLLM
0.26.0's own sleep check reads: gpu_worker.py Worker.sleep, torch.accelerator.get_memory_info before and after), while
NVML's per-process figure, which test_physical_memory settles on, has been seen stale under load. vLLM's
"Sleep mode freed" log line is recorded beside it as a cross-check only: it is the code under test
reporting on itself.
"""

from tests.core import expect, measure, oracle, server_log
from tests.core.prompts import GOLDEN_MAX_TOKENS, PROMPTS

RELEASE = "late release: memory still held when /sleep answered"
RESTORE = "late restore"


def _recover(client, level: int) -> None:
    if level == 1:
        client.wake_up()
    else:
        client.recover_from_level2()


class TestSleepWakeImmediacy:
    FRESH_SERVER = "matches its sleeps with the worker's log lines since the start (tests/core/server_reuse.py)"

    def test_memory_released_when_sleep_returns(self, server, client, golden, recorder, cell):
        kv = server.config.kv_cache_bytes
        for level in (1, 2):
            with client.sleep_window(exclusive=True):  # device-wide readings: nothing on the GPU may move
                before = server.device_used_bytes()
                client.sleep(level=level)
                after = server.device_used_bytes()  # the first reading: no wait, no poll
            logged = server_log.worker_sleeps(server_log.read(server.log_path))
            recorder.record(
                measure.current_test(),
                f"level{level}_freed_immediate_bytes",
                before - after,
                "bytes",
                before=before,
                after=after,
                vllm_logged_freed_bytes=logged[-1].freed_bytes if logged else None,
            )
            expect.asleep(client, level, step=f"sleep level {level}", issue=RELEASE)
            oracle.bounded(
                recorder,
                "device_bytes.freed_at_sleep_answer",
                (before - after) / kv,
                cell.id,
                f"[{RELEASE}] device bytes freed by sleep level {level} at the first reading after /sleep "
                f"answered / KV cache bytes ({before - after} / {kv}; used {before} before, {after} after)",
            )
            _recover(client, level)
            expect.awake(client, step=f"recovery from level {level}", issue=RELEASE)
            expect.golden(client, golden, step=f"level {level} and its recovery", issue=RELEASE)

    def test_memory_restored_when_wake_returns(self, server, client, golden, recorder, cell):
        for how, wakes in (("full wake", [None]), ("staged wake", [["weights"], ["kv_cache"]])):
            with client.sleep_window(exclusive=True):  # device-wide readings: nothing on the GPU may move
                before = server.device_used_bytes()
                client.sleep(level=1)
                for tags in wakes:
                    client.wake_up(tags)
                woken = server.device_used_bytes()  # the first reading after the last wake answered
            recorder.record(
                measure.current_test(),
                "wake_shortfall_immediate_bytes",
                before - woken,
                "bytes",
                before=before,
                woken=woken,
                how=how,
            )
            expect.awake(client, step=f"level 1 and a {how}", issue=RESTORE)
            oracle.bounded(
                recorder,
                "device_bytes.restored_at_wake_answer",
                before - woken,
                cell.id,
                f"[{RESTORE}: memory not back when /wake_up answered] device bytes before the sleep minus "
                f"the first reading after a {how} (used {before} before, {woken} after)",
            )
            expect.golden(client, golden, step=f"level 1 and a {how}", issue=RESTORE)

    def test_request_right_after_wake_is_golden(self, client, golden):
        for how, level in (("full wake", 1), ("staged wake", 1), ("level-2 recovery", 2)):
            client.sleep(level=level)
            expect.asleep(client, level, step=f"sleep level {level}", issue=RESTORE)
            if how == "staged wake":
                client.wake_up(["weights"])
                client.wake_up(["kv_cache"])
            else:
                _recover(client, level)
            # Nothing between the wake's answer and the requests: no flag read, no wait.
            step = f"a request sent right after the {how} answered"
            for prompt in PROMPTS:
                expect.tokens(
                    client.complete(prompt, GOLDEN_MAX_TOKENS), golden[prompt], prompt=prompt, step=step, issue=RESTORE
                )
            expect.awake(client, step=f"level {level} and a {how}", issue=RESTORE)
