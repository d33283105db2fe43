"""Sample for pytest_main_test: a file that defines no tests at all."""


def helper():
    return 1
