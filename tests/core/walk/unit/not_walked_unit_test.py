import os

import pytest

from tests.core.walk import not_walked, plan
from tests.core.walk import operations as ops
from tools.matrix import FRONT_DOORS

PAGE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))),
    "docs",
    "walk",
    "not-walked.md",
)


@pytest.fixture
def left_out_as(monkeypatch):
    """Makes the model leave out, with the class kind_of(op, state) gives (None: it does not), what it made
    before: a precondition someone adds. The planner's caches are cleared around it."""

    def leave_out(kind_of):
        original = ops._left_out

        def patched(op, state):
            kind = kind_of(op, state)
            return original(op, state) or (ops.LeftOut(kind, f"left out as {kind}") if kind else None)

        monkeypatch.setattr(ops, "_left_out", patched)
        plan.clear_caches()

    yield leave_out
    monkeypatch.undo()
    plan.clear_caches()


@pytest.mark.parametrize("door", FRONT_DOORS)
def test_no_pair_a_client_can_send_is_left_unwalked(door):
    d = not_walked.survey(door)
    assert d.planned and d.pairs(ops.MEANINGLESS), "the survey found nothing: it judges nothing"
    assert not d.pairs(ops.UNWALKED), [plan.describe_pair(p) for p in sorted(d.pairs(ops.UNWALKED), key=plan.pair_key)]


@pytest.mark.parametrize("door", FRONT_DOORS)
def test_every_pair_is_planned_or_left_out_once_with_its_class(door):
    d = not_walked.survey(door)
    classes = [d.pairs(kind) for kind in not_walked.CLASSES]
    every = {plan.pair_of(s, op) for s in plan.reachable_states(door) for op in ops.ALL}
    assert set().union(*classes) | plan.reachable_pairs(door) == every
    assert sum(map(len, classes)) + len(plan.reachable_pairs(door)) == len(every), "a pair counted twice"


@pytest.mark.parametrize("door", FRONT_DOORS)
def test_each_kind_of_pinned_failure_is_probed_on_a_pinned_pair(door):
    d = not_walked.survey(door)
    assert d.probed and d.probed <= d.pairs(ops.PINNED)
    probed_kinds = {ops.terminal(probe[-1], plan.run(plan.INITIAL, probe[:-1])) for probe in plan.terminal_probes(door)}
    assert probed_kinds == {name for name, _, _ in plan.terminal_pairs(door)}


def test_a_precondition_without_a_pin_shows_as_not_yet_walked(left_out_as):
    left_out_as(lambda op, s: ops.UNWALKED if op == ops.RESET_PREFIX_CACHE and s.prefix is not None else None)
    unwalked = not_walked.survey(FRONT_DOORS[0]).pairs(ops.UNWALKED)
    assert unwalked and {op for _, op in unwalked} == {ops.RESET_PREFIX_CACHE}
    assert "not yet walked" in not_walked.render()


def test_a_pair_left_out_for_several_classes_counts_in_the_one_the_walk_owes(left_out_as):
    # A reset while a request waits: "meaningless" while a plain request waits, "not yet walked" while only
    # the long one does. Both are states of the situation "a request waiting", so the pair is owed.
    def kind_of(op, s):
        if op != ops.RESET_PREFIX_CACHE or not s.queued:
            return None
        return ops.MEANINGLESS if "plain" in s.queued else ops.UNWALKED

    left_out_as(kind_of)
    door = FRONT_DOORS[0]
    d = not_walked.survey(door)
    kinds: dict = {}
    for s in plan.reachable_states(door):
        if kind_of(ops.RESET_PREFIX_CACHE, s):
            kinds.setdefault(plan.pair_of(s, ops.RESET_PREFIX_CACHE), set()).add(kind_of(ops.RESET_PREFIX_CACHE, s))
    planned = plan.reachable_pairs(door)  # from a state the precondition spares (a request held, not queued)
    both = {pair for pair, k in kinds.items() if k == {ops.MEANINGLESS, ops.UNWALKED}} - planned
    assert both, "no situation left out holds states of both classes: the test shows nothing"
    assert d.pairs(ops.UNWALKED) == {pair for pair, k in kinds.items() if ops.UNWALKED in k} - planned
    assert not d.pairs(ops.MEANINGLESS) & both


def test_the_class_order_names_every_class_a_pair_can_have():
    assert sorted(not_walked.CLASSES) == sorted(ops.LEFT_OUT_KINDS)


def test_a_class_outside_the_three_is_refused(left_out_as):
    left_out_as(lambda op, s: "skipped for now" if op == ops.RESET_PREFIX_CACHE else None)
    with pytest.raises(ValueError, match="unknown class"):
        not_walked.survey(FRONT_DOORS[0])


def test_the_page_is_generated_from_the_model():
    with open(PAGE, encoding="utf-8") as f:
        committed = f.read()
    assert committed == not_walked.render(), (
        "docs/walk/not-walked.md is stale: run `python3 -m tests.core.walk.not_walked > docs/walk/not-walked.md`"
    )
