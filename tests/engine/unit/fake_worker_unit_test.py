"""The fake worker records a forward pass before it raises on released memory, so a test asking whether a
request was scheduled sees the pass, not only the engine's death (test_http_routes.py's partial wake)."""

import types

import pytest

from tests.engine.fakes.timeline import Timeline
from tests.engine.fakes.worker import FakeWorker, ReleasedMemoryAccess


def _worker(**resident):
    return types.SimpleNamespace(resident=resident, timeline=Timeline())


def _scheduled(*request_ids):
    return types.SimpleNamespace(
        total_num_scheduled_tokens=len(request_ids), num_scheduled_tokens={r: 1 for r in request_ids}
    )


def test_a_forward_on_released_memory_is_recorded_then_raises():
    worker = _worker(weights=True, kv_cache=False)
    with pytest.raises(ReleasedMemoryAccess, match="kv_cache released"):
        FakeWorker.execute_model(worker, _scheduled("held"))
    assert worker.timeline.forwarded("held")


def test_a_forward_with_every_pool_resident_is_recorded_once():
    worker = _worker(weights=True, kv_cache=True)
    output = FakeWorker.execute_model(worker, _scheduled("a", "b"))
    assert output.req_ids == ["a", "b"] and [e.detail for e in worker.timeline.of("forward")] == [("a", "b")]
