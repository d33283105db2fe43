"""The fixture's report as headless Chromium draws it: what a person reads first is the headline, in the first
screen; the GPU grid shows every cell of the spec, through every front door; the run history's chart shows
every run inside the window; nothing is wider than a laptop's window. And the probe itself can fail: a page
with an element wider than the window is caught."""

import pathlib

import pytest

from tools.matrix import SLEEP_WAKE_CLASSES, door_cells
from tools.report import browser, reading, render, view

FIXTURE = pathlib.Path(__file__).parent / "testdata" / "testlogs"
HISTORY = pathlib.Path(__file__).parent / "testdata" / "runs.jsonl"  # four runs
LAPTOP = (1280, 800)


@pytest.fixture(scope="module")
def run():
    return view.load_run(str(FIXTURE), str(FIXTURE), [])


@pytest.fixture(scope="module")
def seen(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("page")
    return browser.look(render.page(run, str(out), reading.read_history(str(HISTORY))), *LAPTOP)


def test_the_headline_is_what_a_person_reads_first(run, seen):
    text, _, fake_text = run.headline()
    assert seen["headline"] == text + fake_text
    assert seen["headline_height"] > 0 and seen["headline_top"] < LAPTOP[1] / 4, seen


def test_the_grid_shows_every_cell_of_the_spec(seen):
    # Every class on every HTTP runner x mode and on each in-process door's cells.
    assert seen["grid_cells"] == len(SLEEP_WAKE_CLASSES) * len(door_cells()), seen


def test_the_history_chart_shows_every_run_inside_the_window(seen):
    assert seen["history_runs"] == len(HISTORY.read_text().splitlines()), seen


def test_nothing_is_wider_than_the_window(seen):
    assert seen["overflow"] == [] and seen["scroll_width"] <= seen["viewport"], seen


def test_the_probe_sees_an_overflow():
    seen = browser.look(
        '<!doctype html><html><body><p class="headline">x</p>'
        '<div class="wide" style="width:3000px">wide</div></body></html>',
        *LAPTOP,
    )
    assert "div.wide" in seen["overflow"] and seen["scroll_width"] > seen["viewport"], seen
