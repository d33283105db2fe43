"""A pytest plugin installed in the runner's Python (a pytest11 entry point), as pytest-timeout or
hypothesis' plugin are on the H200 image: pytest_main_test checks that a session never loads it."""


def pytest_configure(config):
    print("sample_autoload_plugin loaded")
