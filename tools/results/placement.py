"""Where a run's CPU-only targets ran, counted from its build events (never from what was planned): in a
`bazel test` of their own beside the GPU waves (tools/run_matrix.sh), or inside an invocation that ran
GPU cells too, and whether they stayed off the GPU job's critical path.

A target is CPU-only when its configured tags (the targetConfigured events) lack GPU_TAG, the tag the
default CPU configuration filters out (tools/defs.bzl GPU_TAGS): the fake tier, the unit tests, the
reuse equivalence, the engine tier. A GPU invocation is one in which a GPU-tagged target ran.
"""

from __future__ import annotations

import dataclasses

from tools.results import testlogs

GPU_TAG = "gpu"
FAKE_TAG = "fake"  # the fake tier's targets (tools/defs.bzl sleep_wake_fake_tier), counted apart


@dataclasses.dataclass
class Placement:
    beside: list[str]  # CPU-only targets that ran in an invocation without any GPU target
    inside: list[str]  # CPU-only targets that ran in a GPU invocation
    fake: int  # of all of them, the fake tier's
    cached: int  # of all of them, results Bazel took from its cache (they ran no test)
    untagged: list[str]  # targets whose tags the events do not give: neither counted as GPU nor CPU-only
    gpu_invocations: int  # invocations in which a GPU target ran
    gpu_span: tuple[float, float] | None  # first GPU invocation's start, last one's end (epoch seconds)
    cpu_span: tuple[float, float] | None  # the same of the invocations that ran only CPU-only targets

    @property
    def targets(self) -> list[str]:
        return self.beside + self.inside

    @property
    def late_s(self) -> float | None:
        """How long the CPU-only invocations went on after the GPU invocations ended (<= 0: they ended
        first); None where the events give either span no times."""
        if not self.gpu_span or not self.cpu_span:
            return None
        return self.cpu_span[1] - self.gpu_span[1]

    @property
    def off_critical_path(self) -> bool | None:
        """True: every CPU-only target ran beside the GPU invocations, which ended no sooner than theirs;
        False: one ran inside a GPU invocation (it holds one of its test jobs, and may be the one that ends
        it) or their invocation ended after the GPU ones; None: nothing ran beside and no GPU invocation
        ran, or the events give no times."""
        if self.inside:
            return False
        if not self.beside or self.late_s is None:
            return None
        return self.late_s <= 0


def _span(invocations: list[testlogs.Invocation]) -> tuple[float, float] | None:
    began = [i.began for i in invocations]
    ended = [i.ended for i in invocations]
    if not invocations or None in began or None in ended:
        return None
    return min(b for b in began if b is not None), max(e for e in ended if e is not None)


def read(bep_paths: list[str]) -> Placement:
    """The placement of the CPU-only targets of the invocations whose build event files are given."""
    invocations = [testlogs.read_bep(p) for p in bep_paths]
    beside: list[str] = []
    inside: list[str] = []
    untagged: list[str] = []
    gpu_invocations: list[testlogs.Invocation] = []
    cpu_invocations: list[testlogs.Invocation] = []
    fake = cached = 0
    for inv in invocations:
        labels = sorted({r.label for r in inv.results})
        gpu = [label for label in labels if GPU_TAG in inv.tags.get(label, ())]
        cpu = [label for label in labels if label in inv.tags and GPU_TAG not in inv.tags[label]]
        untagged += [label for label in labels if label not in inv.tags]
        if gpu or cpu:
            (gpu_invocations if gpu else cpu_invocations).append(inv)
        (inside if gpu else beside).extend(cpu)
        fake += sum(FAKE_TAG in inv.tags[label] for label in cpu)
        cached += sum(r.cached for r in inv.results if r.label in cpu)
    return Placement(
        beside, inside, fake, cached, untagged, len(gpu_invocations), _span(gpu_invocations), _span(cpu_invocations)
    )


def text(p: Placement) -> str:
    """One line: which CPU-only targets ran, where, and whether off the GPU job's critical path."""
    if not p.targets:
        return "CPU-only targets: none ran in this run's bazel tests"
    what = f"CPU-only targets: {len(p.targets)} ran (fake tier {p.fake}, other {len(p.targets) - p.fake}"
    what += f"; {p.cached} from the cache)" if p.cached else ")"
    parts = []
    if p.beside:
        where = f"{len(p.beside)} in a bazel test of their own beside the GPU waves"
        if p.cpu_span and p.gpu_span:
            began, ended = (t - p.gpu_span[0] for t in p.cpu_span)
            # Offsets from the first GPU wave's start: theirs starts just before it.
            where += f" ({began:+.1f} to {ended:+.1f} s of the GPU waves' {p.gpu_span[1] - p.gpu_span[0]:.1f} s)"
        parts.append(where)
    if p.inside:
        parts.append(f"{len(p.inside)} inside a GPU wave's bazel test, where each holds one of its test jobs")
    verdict = {
        True: "off the GPU job's critical path",
        False: "on the GPU job's critical path"
        + (f" (their bazel test ended {p.late_s:.1f} s after the GPU waves)" if not p.inside and p.late_s else ""),
        None: "whether off the GPU job's critical path is unknown (the build events give no times)"
        if p.gpu_invocations
        else "no GPU wave ran",
    }[p.off_critical_path]
    line = f"{what}: {'; '.join(parts)}: {verdict}"
    if p.untagged:
        line += f"; {len(p.untagged)} target(s) without tags in the build events not counted"
    return line
