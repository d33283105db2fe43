"""The host's CPU seconds by kind of process while a run goes on, sampled from /proc.

    python3 -m tools.bench.host_cpu    (tools/run_matrix.sh runs it beside Bazel and stops it with SIGTERM)

Samples every process once a second until SIGTERM or SIGINT (or --samples), then prints one line. The kinds are:
- servers: the zygote host's tree, which holds the zygotes, the supervisors and the vLLM servers;
- bazel: Bazel's Java server;
- tests: its descendants, which are the test wrappers, pytest and the fake tier's servers;
- other: everything else.

A process counts the CPU it used after the first sample. Its last sample is what counts, so a process
loses up to a second before it exits. The line's `unsampled` is the host's busy time from /proc/stat that
no sample saw, mostly processes too short-lived to be sampled. The tests' own processes are a share of a
GPU matrix's CPU that the servers' own timings cannot show (docs/design.md tells the measured shares).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
import time

KINDS = ("servers", "bazel", "tests", "other")
ZYGOTE_HOST = "tools.launcher.zygote_host"


def busy_ticks(proc: str = "/proc") -> int:
    """The host's busy clock ticks since boot: /proc/stat's cpu line without idle and iowait."""
    with open(os.path.join(proc, "stat")) as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return sum(values) - values[3] - values[4]


def _stat(proc: str, pid: str) -> tuple[int, int, int]:
    """(ppid, user + system ticks, start time) of /proc/<pid>/stat."""
    with open(os.path.join(proc, pid, "stat")) as f:
        text = f.read()
    fields = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses
    return int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19])


def _argv(proc: str, pid: int) -> list[str]:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def own_kind(argv: list[str]) -> str | None:
    """The kind a process starts for itself and its descendants, from its argv; None: its parent's."""
    if ZYGOTE_HOST in argv:
        return "servers"
    if argv and (os.path.basename(argv[0]) == "java" or any(a.endswith("A-server.jar") for a in argv)):
        return "bazel"
    return None


class Sampler:
    """CPU ticks per kind over the processes of `proc`, each process counted from the first sample."""

    def __init__(self, proc: str = "/proc"):
        self.proc = proc
        self.kinds: dict[int, str] = {}  # pid -> kind, for the processes seen (pid reuse re-classifies)
        self.seen: dict[tuple, list] = {}  # (pid, start) -> [kind, ticks at first sight, ticks last seen]
        self.first = True

    def _kind(self, pid: int, parents: dict, starts: dict, known: dict) -> str:
        if (pid, starts.get(pid)) in known:
            return known[pid, starts.get(pid)]
        chain: list[int] = []
        p = pid
        while p in parents and (p, starts.get(p)) not in known and len(chain) < 256:
            chain.append(p)
            p = parents[p]
        kind = known.get((p, starts.get(p)), "other")
        for q in reversed(chain):
            mine = own_kind(_argv(self.proc, q))
            if kind == "other" and mine:
                kind = mine
            elif kind == "bazel":
                kind = "tests"  # Bazel's server is bazel; what it starts is the tests'
            known[q, starts.get(q)] = kind
        return kind

    def sample(self) -> None:
        parents, ticks, starts = {}, {}, {}
        for name in os.listdir(self.proc):
            if name.isdigit():
                try:
                    parents[int(name)], ticks[int(name)], starts[int(name)] = _stat(self.proc, name)
                except (OSError, ValueError, IndexError):  # gone while read
                    continue
        known = {key: entry[0] for key, entry in self.seen.items()}
        for pid, used in ticks.items():
            key = (pid, starts[pid])
            if key not in self.seen:
                # Processes alive at the first sample count from there; later ones from their start.
                self.seen[key] = [self._kind(pid, parents, starts, known), used if self.first else 0, used]
            self.seen[key][2] = used
        self.first = False

    def totals(self) -> dict[str, int]:
        out = dict.fromkeys(KINDS, 0)
        for kind, first, last in self.seen.values():
            out[kind] += last - first
        return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True


def summary(totals: dict, busy: int, seconds: float, cores: int, hz: int) -> str:
    cpu = {k: v / hz for k, v in totals.items()}
    busy_s = busy / hz
    share = busy_s / (seconds * cores) if seconds > 0 else 0.0
    return (
        f"host CPU-s over {seconds:.0f} s on {cores} cores: busy {busy_s:.0f} ({100 * share:.0f}%); "
        + ", ".join(f"{k} {cpu[k]:.0f}" for k in KINDS)
        + f"; unsampled {busy_s - sum(cpu.values()):.0f}"
    )


# summary()'s line, as read back: "host CPU-s over 550 s on 16 cores: busy 4241 (48%); servers ..."
_BUSY = re.compile(r"^(?:run_matrix\.sh: )?host CPU-s over [\d.]+ s on \d+ cores: busy (\d+)", re.M)


def busy_s(text: str) -> float | None:
    """The whole host's busy CPU-seconds from summary()'s last line in text; None where it has none."""
    found = _BUSY.findall(text)
    return float(found[-1]) if found else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="The host's CPU seconds by kind of process until SIGTERM.")
    parser.add_argument("--interval_s", type=float, default=1.0, help="seconds between two samples of /proc")
    parser.add_argument("--proc", default="/proc", help="the proc file system to read (tests give a fake one)")
    parser.add_argument("--samples", type=int, default=0, help="stop after this many samples (0: at SIGTERM)")
    parser.add_argument(
        "--while_alive",
        type=int,
        default=0,
        help="also stop once this PID is gone (run_matrix.sh passes its own), so that a killed"
        " run leaves no sampler behind",
    )
    args = parser.parse_args(argv)
    if args.interval_s <= 0:
        parser.error(f"--interval_s={args.interval_s} must be > 0")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    sampler, began, busy0 = Sampler(args.proc), time.monotonic(), busy_ticks(args.proc)
    taken = 0
    while True:
        sampler.sample()
        taken += 1
        if (args.samples and taken >= args.samples) or stop.wait(args.interval_s):
            break
        if args.while_alive and not _alive(args.while_alive):
            break
    if not args.samples:
        sampler.sample()  # what ran since the last tick
    print(
        summary(
            sampler.totals(),
            busy_ticks(args.proc) - busy0,
            time.monotonic() - began,
            os.cpu_count() or 1,
            os.sysconf("SC_CLK_TCK"),
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
