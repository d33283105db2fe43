"""Sample for pytest_main_test: a test that ends the process behind pytest's back."""

import os


def test_exits_the_process():
    os._exit(0)
