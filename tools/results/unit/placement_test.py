"""Where the CPU-only targets ran, from build events written the way Bazel writes them."""

from tools.results import placement
from tools.results.unit.testlogs_testing import write_bep, write_xml

GPU_CELL = ("//tests/sleep_wake:flags_mrv1_eager", ["gpu", "requires-gpu-nvidia", "sleep_wake", "flags"])
FAKE = ("//tests/sleep_wake:flags_fake_mrv1_eager", ["fake", "flags", "http"])
UNIT: tuple[str, list[str]] = ("//tests/sleep_wake/unit:oracle_unit_test", [])


def _bep(tmp_path, name, targets, span):
    results = []
    for label, _ in targets:
        xml = write_xml(tmp_path / name / label.strip("/").replace(":", "/") / "test.xml", {"t": "passed"})
        results.append((label, xml, "PASSED"))
    path = tmp_path / f"{name}.json"
    write_bep(path, results, tags=dict(targets), span=span)
    return str(path)


def test_cpu_only_targets_beside_the_gpu_waves_that_end_first_are_off_the_critical_path(tmp_path):
    walk = _bep(tmp_path, "walk", [GPU_CELL], (1000.0, 1300.0))
    rest = _bep(tmp_path, "rest", [GPU_CELL], (1300.0, 1450.0))
    cpu = _bep(tmp_path, "cpu", [FAKE, UNIT], (1001.0, 1150.0))
    p = placement.read([walk, rest, cpu])
    assert (sorted(p.beside), p.inside, p.fake, p.off_critical_path) == (sorted([FAKE[0], UNIT[0]]), [], 1, True)
    assert placement.text(p) == (
        "CPU-only targets: 2 ran (fake tier 1, other 1): 2 in a bazel test of their own beside the GPU waves"
        " (+1.0 to +150.0 s of the GPU waves' 450.0 s): off the GPU job's critical path"
    )


def test_cpu_only_targets_inside_a_gpu_wave_or_ending_after_it_are_on_the_critical_path(tmp_path):
    mixed = _bep(tmp_path, "mixed", [GPU_CELL, FAKE], (1000.0, 1300.0))
    p = placement.read([mixed])
    assert (p.inside, p.beside, p.off_critical_path) == ([FAKE[0]], [], False)
    assert "1 inside a GPU wave's bazel test" in placement.text(p)
    gpu = _bep(tmp_path, "gpu", [GPU_CELL], (1000.0, 1100.0))
    late = _bep(tmp_path, "late", [UNIT], (1000.0, 1130.0))
    p = placement.read([gpu, late])
    assert (p.off_critical_path, p.late_s) == (False, 30.0)
    late = "on the GPU job's critical path (their bazel test ended 30.0 s after the GPU waves)"
    assert placement.text(p).endswith(late)


def test_targets_without_tags_in_the_events_count_as_neither(tmp_path):
    results = [(UNIT[0], write_xml(tmp_path / "u" / "test.xml", {"t": "passed"}), "PASSED")]
    write_bep(tmp_path / "old.json", results)  # no targetConfigured events: an older reader's fixture
    p = placement.read([str(tmp_path / "old.json")])
    assert (p.targets, p.untagged) == ([], [UNIT[0]])
    assert placement.text(p) == "CPU-only targets: none ran in this run's bazel tests"
