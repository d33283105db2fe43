"""Recording measurements, bounded waiting and the statistics of a series (median step, spread)."""

import json
import os
import statistics
import tempfile
import threading
import time

from tests.core import liveness, oracle, thresholds
from tools.results.testlogs import MEASUREMENTS_FILE  # the readers of results share the name


def outputs_dir() -> str:
    """Bazel's undeclared-outputs dir (ends up in outputs.zip), or a temp dir outside Bazel."""
    path = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or os.path.join(
        tempfile.gettempdir(), f"sleepwake-outputs-{os.getpid()}"
    )
    os.makedirs(path, exist_ok=True)
    return path


def current_test() -> str:
    """The running pytest node id (from PYTEST_CURRENT_TEST), or "" outside a test."""
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]


class Recorder:
    """Appends one JSON object per measurement to measurements.jsonl (thread-safe)."""

    def __init__(self, path: str | None = None, cell_id: str | None = None):
        self.path = path or os.path.join(outputs_dir(), MEASUREMENTS_FILE)
        self.cell_id = cell_id
        self._lock = threading.Lock()

    def record(self, test_name: str, key: str, value, unit: str, **extra) -> dict:
        entry = {
            "time": time.time(),
            "cell": self.cell_id,
            "test": test_name or current_test(),
            "key": key,
            "value": value,
            "unit": unit,
            **extra,
        }
        line = json.dumps(entry, sort_keys=True, default=str)
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        return entry

    def entries(self) -> list[dict]:
        if not os.path.exists(self.path):
            return []
        with open(self.path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]


class WaitTimeout(TimeoutError):
    """A wait that is no oracle ran out: the test could not reach the state it needed (errored)."""


def wait_for_server(predicate, timeout_s: float, what: str, confirm_live, poll_s: float | None = None) -> float:
    """Poll `predicate` until truthy (a request to end, /load to drain); return the seconds it took. After
    timeout_s the server has not done it: confirm_live(what) raises what a server that is not live is, and
    a live one raises liveness.NoAnswer. Never an oracle: a hang and a host too loaded to serve in time
    look the same, so only a catalogued hang may count it, against its control (tests/core/verdict.py).
    A bound on how long it took is an oracle of its own on the seconds returned (oracle.bounded)."""
    try:
        return wait_until(predicate, timeout_s, poll_s=poll_s, what=what)
    except WaitTimeout:
        confirm_live(f"{what}: not after {timeout_s:g} s")
        raise liveness.NoAnswer(
            f"{what}: not after {timeout_s:g} s on a live server (a hang, or a host too loaded to serve it: "
            "proves nothing unless the mutant is a hang and its control stayed clean)"
        ) from None


def wait_until(
    predicate,
    timeout_s: float,
    poll_s: float | None = None,
    what: str = "condition",
    oracle_id: str | None = None,
    confirm_live=None,
) -> float:
    """Poll `predicate` (every poll_s, default the poll_s threshold) until truthy; return the seconds
    it took. After timeout_s: the oracle `oracle_id` fails where the wait is a measurement of its own (NVML
    bytes that must settle), else WaitTimeout (the wait only sets a test up; a wait on the server to
    answer is wait_for_server). confirm_live(what), required with an oracle: called before the oracle
    fails, it raises instead when the server is not live (client.confirm_live)."""
    if oracle_id is not None and confirm_live is None:
        raise ValueError(
            f"wait_until({what!r}, oracle_id={oracle_id!r}) without confirm_live: pass the "
            "client's confirm_live, so that the oracle fails only on a live server"
        )
    poll_s = thresholds.get("poll_s") if poll_s is None else poll_s
    start = time.monotonic()
    deadline = start + timeout_s
    while True:
        last = predicate()
        if last:
            return time.monotonic() - start
        if time.monotonic() >= deadline:
            if oracle_id is not None:
                if confirm_live is not None:
                    confirm_live(f"{what}: not after {timeout_s:g} s")
                oracle.fail(
                    oracle_id,
                    f"{what}: not within the bound",
                    f"not after {timeout_s:g} s (last value {last!r})",
                    f"{timeout_s:g} s",
                    "within",
                )
            raise WaitTimeout(f"timed out after {timeout_s:g} s waiting for {what}; last value {last!r}")
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


def assert_holds(
    oracle_id: str, predicate, duration_s: float, poll_s: float | None = None, what: str = "condition"
) -> None:
    """The oracle `oracle_id`: `predicate` stays truthy for the whole of duration_s (a bounded
    observation window), sampled every poll_s (default the hold_sample_s threshold). An exception from
    the predicate (the server unreachable) propagates: it is no observation of the invariant."""
    poll_s = thresholds.get("hold_sample_s") if poll_s is None else poll_s
    start = time.monotonic()
    while True:
        value = predicate()
        elapsed = time.monotonic() - start
        if not value:
            oracle.fail(
                oracle_id,
                what,
                f"stopped holding after {elapsed:.2f} s (last value {value!r})",
                f"holds for the {duration_s:g} s window",
                "",
            )
        if elapsed >= duration_s:
            return
        time.sleep(min(poll_s, duration_s - elapsed))


def timed(fn, *args, **kwargs):
    """(result, seconds) of one call, on the monotonic clock."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def median(samples) -> float:
    if not samples:
        raise ValueError("median of no samples")
    return float(statistics.median(samples))


def increments(values) -> list:
    """values[i+1] - values[i] for each consecutive pair."""
    return [b - a for a, b in zip(values, values[1:])]


def median_increment(values) -> float:
    """The median step of a series: a steady leak per cycle shows here, while one jump (a pool that
    grew once, a late first-cycle allocation) moves it not at all; `spread` catches the jump."""
    if len(values) < 2:
        raise ValueError(f"median increment of a series needs two values, got {list(values)}")
    return median(increments(values))


def spread(values) -> float:
    """max - min of a series."""
    if not values:
        raise ValueError("spread of no values")
    return max(values) - min(values)
