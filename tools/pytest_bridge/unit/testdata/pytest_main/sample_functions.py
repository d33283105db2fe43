"""Sample for pytest_main_test: module-level tests, which shard as one group."""


def test_a():
    pass


def test_b():
    pass


def test_c():
    pass
