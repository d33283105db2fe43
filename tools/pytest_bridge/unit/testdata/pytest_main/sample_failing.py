"""Sample for pytest_main_test: one passing and one failing test."""


def test_passes():
    pass


def test_fails():
    assert False, "this sample fails on purpose"
