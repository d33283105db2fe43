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
