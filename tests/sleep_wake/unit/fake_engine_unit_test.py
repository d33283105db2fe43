"""FakeEngine's state machine and memory model, directly (the fake tier runs the classes through it)."""

import pytest

from tests.sleep_wake.fakes.fake_engine import DEFECTS, LEAK_PER_WAKE, FakeEngine, GpuMemory
from tests.sleep_wake.lib import metrics

MiB = 1 << 20
EAGER = GpuMemory.for_mode(weights=500 * MiB, kv_cache=2048 * MiB, mode="eager")
GRAPH = GpuMemory.for_mode(weights=500 * MiB, kv_cache=2048 * MiB, mode="graph")


def test_bytes_follow_the_resident_tags():
    e = FakeEngine(EAGER)
    awake = e.gpu_bytes()
    assert awake == EAGER.context + EAGER.weights + EAGER.kv_cache + EAGER.activations
    e.sleep(1, "abort")
    assert e.gpu_bytes() == EAGER.context
    e.wake_up(["weights"])
    assert e.gpu_bytes() == EAGER.context + EAGER.weights
    e.wake_up(["kv_cache"])
    # The activation blocks come back with the next forward, not with the wake.
    assert e.gpu_bytes() == awake - EAGER.activations
    e.prefill("a prompt")
    assert e.gpu_bytes() == awake
    assert e.device_used_bytes() == awake + EAGER.device_other


def test_graph_mode_keeps_its_pool_asleep():
    e = FakeEngine(GRAPH)
    e.sleep(1, "abort")
    assert e.gpu_bytes() == GRAPH.context + GRAPH.graph_pool and GRAPH.graph_pool > 0


def test_scheduling_resumes_only_when_every_tag_is_awake():
    e = FakeEngine(EAGER)
    e.sleep(1, "abort")
    e.wake_up(["weights", "scheduling"])
    assert e.paused and e.is_sleeping() and e.gauge_values() == metrics.GAUGE_AWAKE
    e.wake_up(["no_such_tag"])
    assert e.sleeping_tags == {"kv_cache"}
    e.wake_up(["kv_cache"])
    assert not e.paused and not e.is_sleeping()


@pytest.mark.parametrize("level,gauge,valid", [(0, metrics.GAUGE_LEVEL0, True), (1, metrics.GAUGE_LEVEL1, True),
                                               (2, metrics.GAUGE_LEVEL2, False), (3, metrics.GAUGE_LEVEL0, False)])
def test_levels(level, gauge, valid):
    e = FakeEngine(EAGER)
    e.sleep(level, "abort")
    assert e.gauge_values() == gauge and e.weights_valid is valid
    assert e.sleeping_tags == (set() if level == 0 else {"weights", "kv_cache"})


def test_defects_change_what_they_name():
    kept = FakeEngine(EAGER, defects=["kv_cache_kept_on_sleep"])
    kept.sleep(1, "abort")
    assert kept.gpu_bytes() == EAGER.context + EAGER.kv_cache
    leaky = FakeEngine(EAGER, defects=["leak_per_wake"])
    for _ in range(3):
        leaky.sleep(1, "abort")
        leaky.wake_up(None)
    assert leaky.leaked == 3 * LEAK_PER_WAKE
    noop = FakeEngine(EAGER, defects=["reload_weights_noop"])
    noop.sleep(2, "abort")
    noop.wake_up(["weights"])
    noop.reload_weights()
    assert not noop.weights_valid


def test_unknown_defect_is_refused():
    with pytest.raises(ValueError, match="unknown fake defects"):
        FakeEngine(EAGER, defects=["no_such_bug"])
    assert "gauge_tracks_tags" in DEFECTS


def test_reload_while_weights_asleep_fails():
    e = FakeEngine(EAGER)
    e.sleep(2, "abort")
    with pytest.raises(RuntimeError, match="asleep"):
        e.reload_weights()
