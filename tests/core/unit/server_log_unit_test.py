"""tests/core/server_log.py on the lines vLLM 0.26.0 writes (format strings from cumem.py and gpu_worker.py)."""

from tests.core import server_log

GiB = 1 << 30
LOG = """INFO 11-29 10:00:01 [api_server.py:1] vLLM API server version 0.26.0
(EngineCore pid=4242) INFO 11-29 10:00:05 [cumem.py:251] CuMemAllocator: sleep freed 2.46 GiB memory in \
total, of which 0.48 GiB is backed up in CPU and the rest 1.98 GiB is discarded directly.
(EngineCore pid=4242) INFO 11-29 10:00:05 [gpu_worker.py:216] Sleep mode freed 2.52 GiB memory, 0.88 GiB \
memory is still in use.
(EngineCore pid=4242) INFO 11-29 10:00:09 [cumem.py:251] CuMemAllocator: sleep freed 2.46 GiB memory in \
total, of which 0.00 GiB is backed up in CPU and the rest 2.46 GiB is discarded directly.
(EngineCore pid=4242) INFO 11-29 10:00:09 [gpu_worker.py:216] Sleep mode freed 2.9 GiB memory, 0.5 GiB \
memory is still in use.
"""


def test_allocator_sleeps_tell_level1_from_level2_by_the_backup():
    sleeps = server_log.allocator_sleeps(LOG)
    assert [round(s.backed_up_bytes / GiB, 2) for s in sleeps] == [0.48, 0.0]
    assert [round(s.total_bytes / GiB, 2) for s in sleeps] == [2.46, 2.46]


def test_worker_sleeps_read_freed_and_used():
    sleeps = server_log.worker_sleeps(LOG)
    assert [(round(s.freed_bytes / GiB, 2), round(s.used_bytes / GiB, 2)) for s in sleeps] == [(2.52, 0.88), (2.9, 0.5)]


def test_a_server_that_never_slept_has_no_entries(tmp_path):
    path = tmp_path / "server.log"
    path.write_text(LOG.splitlines()[0] + "\n")
    text = server_log.read(str(path))
    assert server_log.allocator_sleeps(text) == [] and server_log.worker_sleeps(text) == []
