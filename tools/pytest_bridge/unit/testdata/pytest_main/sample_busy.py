"""Sample for pytest_main_test: a test that spends CPU in a function of its own, for the test profile."""

import time


def spend_cpu(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_spends_cpu():
    spend_cpu(0.3)
