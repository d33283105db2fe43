"""Sample for pytest_main_test: a test that blocks until a signal; its fixture records teardown.

The test writes its process id to SAMPLE_SIGNAL_DIR/started (the pytest process, a child of
pytest_main) and the fixture appends a line to SAMPLE_SIGNAL_DIR/torn_down per teardown.
"""

import os
import pathlib
import threading

import pytest


@pytest.fixture(scope="class")
def server():
    signal_dir = pathlib.Path(os.environ["SAMPLE_SIGNAL_DIR"])
    yield
    with open(signal_dir / "torn_down", "a") as f:
        f.write("torn down\n")


class TestBlocks:
    def test_blocks_until_terminated(self, server):
        (pathlib.Path(os.environ["SAMPLE_SIGNAL_DIR"]) / "started").write_text(str(os.getpid()))
        threading.Event().wait(120)  # SIGTERM interrupts this wait
