"""Where one server's wall time went, for tools/bench's per-phase breakdown of the matrix.

The fixtures record it when a server stops (tests/sleep_wake/conftest.py, key server_timings), so a
slow matrix can be split into waiting for a GPU slot, starting, waiting on GPU neighbours' memory
phases, tearing down, and the tests' own requests (the rest of the cell's time).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ServerTimings:
    lease_wait_s: float = 0.0  # waiting for a GPU slot (gpu_lease.acquire), or for a parked server
    # Servers this process started (restarts included); a server it took over from another test
    # process (parking.py) was started there, and counts there.
    launches: int = 0
    # The phases do not overlap: a start's or a stop's own wait for its memory phase counts only there.
    start_s: float = 0.0  # launch to GET /health 200, retries and restarts added
    memory_phase_wait_s: float = 0.0  # waiting for neighbours' memory phases (gpu_lease.memory_phase)
    memory_phases: int = 0  # phases entered: starts, sleeps, wakes, reloads, stops
    # The server's sleeps that vLLM's own check failed ("Memory usage increased after sleeping."): a
    # neighbour's allocation landed in the sleep (memory_claims.py). Counted where the server's worker
    # brackets its calls (phase_plugin), the only servers with neighbours.
    sleep_asserts: int = 0
    stop_s: float = 0.0  # teardown and the NVML release check, once its memory phase is held
    # CPU seconds of the server's process tree (the API server, the engine core, their helpers), to GET
    # /health and then to its stop: the servers' part of the host's CPU work, which on a runner whose cores
    # are all busy bounds the matrix (tools/bench/bazel_runs.py servers_cpu, host_floor). A forked
    # server's clock starts at the fork.
    start_cpu_s: float = 0.0
    serve_cpu_s: float = 0.0
    # The tree's CPU seconds at its last stop, start and serving together, by "process/thread" name
    # (process_tree.thread_cpu): which of vLLM's threads the CPU floor is made of.
    cpu_by_thread: dict = dataclasses.field(default_factory=dict)

    # The same phases by what took them (a worker's call: sleep, wake, reload; start:<step>; the launcher's
    # own: start, stop, ...): {"n", "waited_s", "held_s"} each, held where known (-1: not known). Which kind of
    # phase waits behind which holds is what a narrower lock rule is judged from (tools/bench/bazel_runs.py).
    memory_phase_by: dict = dataclasses.field(default_factory=dict)

    # A worker's calls by what they were (sleep, wake, reload): {"n" measured, "grew" those after which
    # torch's caching allocator held more mapped, "max" the most bytes one added}. Whether a reload maps new
    # device memory after a server's first is what its phase's width would be judged from.
    reserved_growth_by: dict = dataclasses.field(default_factory=dict)

    # The worker's start steps by name, in the same shape: the device bytes a step mapped beyond the pools
    # it fills (memory_budget.beyond_pools): what the bounds each step declares beside its pools under the
    # rule bytes (step_overhead_bytes, load_overhead_bytes) are taken from and checked against.
    step_bytes_by: dict = dataclasses.field(default_factory=dict)

    def add_reserved_delta(self, what: str, delta: int, declared: int | None = None) -> None:
        _add_growth(self.reserved_growth_by, what, delta, declared)

    def add_step_bytes(self, step: str, beyond_pools: int, declared: int | None = None) -> None:
        _add_growth(self.step_bytes_by, step, beyond_pools, declared)

    def add_memory_phase(self, waited_s: float, what: str = "", held_s: float | None = None) -> None:
        self.memory_phase_wait_s += waited_s
        self.memory_phases += 1
        entry = self.memory_phase_by.setdefault(what or "unnamed", {"n": 0, "waited_s": 0.0, "held_s": 0.0})
        entry["n"] += 1
        entry["waited_s"] += waited_s
        if held_s is None or entry["held_s"] < 0:
            entry["held_s"] = -1.0
        else:
            entry["held_s"] += held_s

    def as_record(self) -> dict:
        record = {k: round(v, 3) if isinstance(v, float) else v for k, v in dataclasses.asdict(self).items()}
        record["memory_phase_by"] = {
            k: {"n": e["n"], "waited_s": round(e["waited_s"], 3), "held_s": round(e["held_s"], 3)}
            for k, e in sorted(self.memory_phase_by.items())
        }
        record["cpu_by_thread"] = {
            k: {"cpu_s": round(g["cpu_s"], 2), "threads": g["threads"]} for k, g in self.cpu_by_thread.items()
        }
        return record


def _add_growth(table: dict, what: str, delta: int, declared: int | None = None) -> None:
    """{"n" measured, "grew" those that added bytes, "max" the most bytes one added, "over" those that added
    more than they declared beside their pools under the rule bytes (declared; None: nothing declared)} per
    what: an allocation larger than it declared could land in a neighbour's sleep unaccounted."""
    entry = table.setdefault(what, {"n": 0, "grew": 0, "max": 0, "over": 0})
    entry["n"] += 1
    entry["grew"] += delta > 0
    entry["max"] = max(entry["max"], delta)
    entry["over"] += declared is not None and delta > declared
