"""settled_gpu_bytes: NVML bytes that never settle within memory_settle_s_max fail device_bytes.settles on a
live server, but only where the window held the three readings a settle compares; a host that stalled the
test's process so that it read fewer measured nothing, which is no answer, never the oracle."""

import dataclasses
import http.server
import threading
import time

import pytest

from tests.core import liveness, memory, oracle, thresholds

WINDOW_S = 0.3  # memory_settle_s_max for these tests: a window a unit test can wait out


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802  http.server's name
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def live_url():
    """A live server's /health (200)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(autouse=True)
def short_window(monkeypatch):
    for name, value in (("memory_settle_s_max", WINDOW_S), ("memory_settle_poll_s", 0.02)):
        monkeypatch.setitem(thresholds.TABLE, name, dataclasses.replace(thresholds.TABLE[name], value=value))


class _Server:
    """NVML bytes that grow by a granule at every reading (never settled); each reading after the first
    takes `read_s`, as on a host that does not schedule the reading process."""

    def __init__(self, url: str, read_s: float):
        self.url, self.read_s, self.bytes = url, read_s, 1 << 30

    def gpu_bytes(self) -> int:
        if self.bytes > 1 << 30:
            time.sleep(self.read_s)  # the stall itself, not a wait for a condition
        self.bytes += 4 * memory.MiB
        return self.bytes

    def pids(self) -> list[int]:
        return [1]


def test_a_window_with_fewer_than_three_readings_is_no_answer_not_the_oracle(live_url):
    with pytest.raises(liveness.NoAnswer, match="only 2 NVML reading") as e:
        memory.settled_gpu_bytes(_Server(live_url, read_s=2 * WINDOW_S), "after a sleep")
    assert not isinstance(e.value, oracle.OracleFailure) and e.value.liveness is None


def test_bytes_that_never_settle_over_three_readings_fail_the_oracle(live_url):
    with pytest.raises(oracle.OracleFailure) as e:
        memory.settled_gpu_bytes(_Server(live_url, read_s=0.0), "after a sleep")
    assert e.value.oracle_id == "device_bytes.settles"
