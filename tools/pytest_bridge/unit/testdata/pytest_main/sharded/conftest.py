"""Fixtures of the sharded sample: a class-scoped "server", like the GPU suite's one vLLM server per class.

Each start appends the class name to SAMPLE_SIGNAL_DIR/servers, so a test can count the servers a
shard started.
"""

import os
import pathlib

import pytest


@pytest.fixture(scope="class", autouse=True)
def server(request):
    with open(pathlib.Path(os.environ["SAMPLE_SIGNAL_DIR"]) / "servers", "a") as f:
        f.write(request.cls.__name__ + "\n")
    yield
