"""Host stalls: a sampler of the monotonic clock beside a timed measurement, so that a sample the host's
stall inflated is left out and counted, never judged.

A wall-clock bound (requests.abort_time: seconds from /sleep to an aborted request's end) measures the
server only where this process ran while it timed: on a host too loaded to schedule it, the seconds it was
not scheduled are in the sample, and a healthy server fails. A thread that reads the clock every poll_s
sees such a stall as a gap between two of its readings far longer than its period; a sample whose window
holds a gap past host_stall_s (the thresholds table says why there) is recorded under STALLED_KEY, with the gap,
and the report counts those (tools/report), instead of judging it.
"""

from __future__ import annotations

import threading
import time

from tests.core import oracle, thresholds
from tools.results.testlogs import STALLED_KEY


class Sampler:
    """A thread that reads time.perf_counter() (monotonic) every `period_s` while the block runs."""

    def __init__(self, period_s: float | None = None):
        self.period_s = thresholds.get("poll_s") if period_s is None else period_s
        self._ticks: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._ticks.append(time.perf_counter())

    def __enter__(self) -> Sampler:
        self._ticks.append(time.perf_counter())
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._ticks.append(time.perf_counter())

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time between two readings of the clock around the window [start, end] (perf_counter):
        from the last reading before it to the first after, the window's own ends where there is none."""
        ticks = list(self._ticks)
        inside = [t for t in ticks if start < t < end]
        before = [t for t in ticks if t <= start][-1:] or [start]
        after = [t for t in ticks if t >= end][:1] or [end]
        points = before + inside + after
        return max(b - a for a, b in zip(points, points[1:]))


def bounded_unless_stalled(
    recorder, sampler: Sampler, oracle_id: str, start: float, end: float, cell_id: str | None, what: str
) -> bool:
    """oracle.bounded on the seconds from `start` to `end` (perf_counter), unless the host stalled in that
    window (a gap in `sampler`'s readings past host_stall_s): then the sample is recorded under STALLED_KEY, not
    judged. Whether it was judged."""
    gap, bound = sampler.longest_gap(start, end), thresholds.get("host_stall_s")
    if gap > bound:
        recorder.record(
            "",
            STALLED_KEY,
            end - start,
            "s",
            oracle=oracle_id,
            gap=gap,
            bound=bound,
            what=f"{what} (left out: host stall)",
        )
        return False
    oracle.bounded(recorder, oracle_id, end - start, cell_id, what)
    return True
