"""Sample for pytest_main_test: a test that blocks until SIGTERM; its fixture records teardown."""

import os
import pathlib
import threading

import pytest


@pytest.fixture(scope="class")
def server():
    signal_dir = pathlib.Path(os.environ["SAMPLE_SIGNAL_DIR"])
    yield
    (signal_dir / "torn_down").write_text("")


class TestBlocks:
    def test_blocks_until_terminated(self, server):
        (pathlib.Path(os.environ["SAMPLE_SIGNAL_DIR"]) / "started").write_text("")
        threading.Event().wait(120)  # SIGTERM interrupts this wait
