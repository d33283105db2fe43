"""Sample for pytest_main_test: checks, from inside the run, what pytest_main set up."""

import os
import sys


def test_premature_exit_file_exists_while_running():
    assert os.path.exists(os.environ["TEST_PREMATURE_EXIT_FILE"])


def test_basetemp_is_under_test_tmpdir(tmp_path):
    assert str(tmp_path).startswith(os.path.join(os.environ["TEST_TMPDIR"], "pytest") + os.sep)


def test_cache_provider_is_disabled(request):
    assert not hasattr(request.config, "cache")


def test_script_directory_is_not_on_sys_path():
    # Under Bazel it would be the source tree's tools/, outside the runfiles.
    assert not [path for path in sys.path if os.path.isfile(os.path.join(path, "pytest_main.py"))]
    assert os.getcwd() in sys.path
