"""The weight-update tables count what ran: each recipe and push way gets the verdict of every cell that ran
it, a failure anywhere fails it, and a way no cell ran is absent, never passed."""

from tools.report import view, weight_updates
from tools.results.testlogs import Case


def _cell(test_class, door, runner, mode, *cases):
    cell = view.Cell(test_class, runner, mode, door, state="passed")
    cell.cases = [Case("tests.sleep_wake.X", name, outcome) for name, outcome in cases]
    return cell


CELLS = [
    _cell(
        "rl_recipes",
        "async_llm",
        "mrv2",
        "graph",
        ("test_verl_hybrid[MRV2-graph]", "passed"),
        ("test_openrlhf_partial_rollout[MRV2-graph]", "failed"),
    ),
    _cell("rl_recipes", "http", "mrv1", "eager", ("test_resume_while_a_tag_sleeps[MRV1-eager]", "passed")),
    _cell("rl_recipes", "async_llm", "mrv2", "graph", ("test_resume_while_a_tag_sleeps[MRV2-graph]", "passed")),
    _cell(
        "weight_sync",
        "http",
        "mrv2",
        "eager",
        ("test_pushed_weights_survive_cycles[tensor-MRV2-eager]", "passed"),
        ("test_pushed_weights_survive_level1_sleep[tensor-MRV2-eager]", "failed"),
        ("test_pushed_weights_survive_cycles[ipc-MRV2-eager]", "passed"),
        ("test_pushed_weights_survive_cycles[native-MRV2-eager]", "skipped"),
    ),
    _cell("flags", "http", "mrv2", "eager", ("test_level1_flags[MRV2-eager]", "passed")),
]


def test_each_recipe_has_its_cells_verdicts():
    rows = {r.name: r for r in weight_updates.recipes(CELLS)}
    assert sorted(rows) == ["test_openrlhf_partial_rollout", "test_resume_while_a_tag_sleeps", "test_verl_hybrid"]
    assert rows["test_openrlhf_partial_rollout"].outcome == "failed"
    resume = rows["test_resume_while_a_tag_sleeps"]
    assert resume.outcome == "passed" and sorted(resume.by_cell) == ["HTTP · MRV1-eager", "async_llm · MRV2-graph"]


def test_each_push_way_sums_its_tests_and_a_failure_fails_it():
    rows = {r.name: r for r in weight_updates.push_ways(CELLS)}
    assert sorted(rows) == ["ipc", "native", "tensor"]  # disk ran nowhere: absent, not passed
    assert rows["tensor"].outcome == "failed" and rows["tensor"].by_cell == {"HTTP · MRV2-eager": "failed 1/2"}
    assert rows["ipc"].outcome == "passed"
    assert rows["native"].outcome == "skipped"


def test_the_text_names_every_row():
    text = "\n".join(weight_updates.lines(CELLS))
    assert "RL recipe test_verl_hybrid: passed (async_llm · MRV2-graph passed)" in text
    assert "push way tensor: failed (HTTP · MRV2-eager failed 1/2)" in text


def _walk_cell(runner, records, *cases):
    cell = view.Cell("state_walk", runner, "graph", "http", state="passed")
    cell.records = records
    cell.cases = [Case("tests.sleep_wake.test_state_walk.TestStateWalkShard0", n, o, text=t) for n, o, t in cases]
    return cell


WALK_CELLS = [
    _walk_cell(
        "mrv2",
        [
            {
                "key": "walk_coverage",
                "visited_pairs": ["push:tensor:B in awake", "push:tensor:A in awake", "resume in x"],
            },
            {"key": "walk_coverage", "visited_pairs": ["push:tensor:B in awake", "pause:keep in y"]},
        ],
        (
            "test_walk[MRV2-graph]",
            "failed",
            "[oracle host_bytes.cycle_spread] walk step 6 (push:tensor:B from level 0, paused (all)): ...\n"
            "[oracle host_bytes.level2_asleep] walk step 33 (push:tensor:A from level 2, asleep kv_cache): ...",
        ),
    ),
    _walk_cell("mrv1", [{"key": "walk_coverage", "visited_pairs": ["push:tensor:B in awake", "reload:- in z"]}]),
]


def test_each_walk_operation_has_its_pairs_or_its_failures_per_cell():
    rows = {r.name: r for r in weight_updates.walk_operations(WALK_CELLS)}
    assert sorted(rows) == ["pause:keep", "push:tensor", "reload", "resume"]
    tensor = rows["push:tensor"]
    assert tensor.outcome == "failed"
    assert tensor.by_cell == {"HTTP · MRV1-graph": "passed, 1 pairs", "HTTP · MRV2-graph": "failed at 2 steps"}
    assert rows["resume"].by_cell == {"HTTP · MRV2-graph": "passed, 1 pairs"}  # ran in one cell only
    assert rows["resume"].outcome == "passed"
