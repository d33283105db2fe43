"""The fake tier's lists against the suite's classes: every class of the spec (tools/matrix.bzl) runs
against the fake (FAKE_TIER_CELLS) or is listed with the reason it cannot (FAKE_TIER_EXCLUDED), never both;
and the fake re-creates every mutant of the catalogue, so //tests/mutants:fake_mutants covers it."""

import os
import re

import sleepwake_mutants

from tests.core.not_re_created import NOT_RE_CREATED
from tests.sleep_wake.fakes.fake_defects import DEFECTS, FAKE_ONLY
from tools import matrix

SUITE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/sleep_wake
WORKSPACE = os.path.dirname(os.path.dirname(SUITE))


CLASSES = matrix.SLEEP_WAKE_CLASSES
RUN = matrix.FAKE_TIER_CELLS
EXCLUDED = matrix.FAKE_TIER_EXCLUDED


def test_every_class_runs_on_the_fake_or_says_why_not():
    assert len(CLASSES) >= 11, f"only {len(CLASSES)} classes in tools/matrix.bzl: {sorted(CLASSES)}"
    both = sorted(set(RUN) & set(EXCLUDED))
    assert not both, f"classes both run and excluded in tools/matrix.bzl: {both}"
    unlisted = sorted(set(CLASSES) - set(RUN) - set(EXCLUDED))
    assert not unlisted, (
        f"classes in neither FAKE_TIER_CELLS nor FAKE_TIER_EXCLUDED (tools/matrix.bzl): "
        f"{unlisted}. Run them against the fake, or exclude them with the reason the fake cannot run them."
    )
    unknown = sorted((set(RUN) | set(EXCLUDED)) - set(CLASSES))
    assert not unknown, f"FAKE_TIER_CELLS/EXCLUDED name classes SLEEP_WAKE_CLASSES does not have: {unknown}"


def test_every_listed_class_has_a_cell_and_every_exclusion_a_reason():
    assert all(RUN.values()), f"classes with no fake cell: {[c for c, v in RUN.items() if not v]}"
    for test_class, reason in EXCLUDED.items():
        assert isinstance(reason, str) and len(reason.split()) >= 5, (
            f"{test_class}: say in a sentence why the fake cannot run it, not {reason!r}"
        )


def test_the_fake_recreates_every_catalogued_mutant_or_says_why_not():
    missing = sorted(set(sleepwake_mutants.MUTANTS) - set(DEFECTS) - set(NOT_RE_CREATED))
    assert not missing, (
        f"mutants of the catalogue the fake does not re-create (fake_defects.DEFECTS): "
        f"{missing}; //tests/mutants:fake_mutants would fail for them"
    )
    assert not set(NOT_RE_CREATED) & set(DEFECTS) and set(NOT_RE_CREATED) <= set(sleepwake_mutants.MUTANTS)
    assert all(len(why.split()) >= 5 for why in NOT_RE_CREATED.values())
    build = open(os.path.join(WORKSPACE, "tests/mutants/BUILD.bazel"), encoding="utf-8").read()
    listed = re.search(r"\nFAKE_NOT_RE_CREATED = \[(.*?)\]", build, re.DOTALL)
    assert listed and sorted(re.findall(r'"(\w+)"', listed.group(1))) == sorted(NOT_RE_CREATED), (
        "tests/mutants/BUILD.bazel FAKE_NOT_RE_CREATED must list fake_defects.NOT_RE_CREATED"
    )


def test_every_defect_is_a_catalogued_mutant_or_declared_fake_only():
    stray = sorted(set(DEFECTS) - set(sleepwake_mutants.MUTANTS) - set(FAKE_ONLY))
    assert not stray, (
        f"fake defects that are neither mutants of the catalogue nor in "
        f"fake_defects.FAKE_ONLY: {stray}; a renamed mutant leaves its old name here"
    )
    assert set(FAKE_ONLY) <= set(DEFECTS) and not set(FAKE_ONLY) & set(sleepwake_mutants.MUTANTS)
