"""Builds a Python "site" directory from which vLLM's plugin scan loads the sleepwake_mutants plugin.

vLLM finds general plugins with importlib.metadata.entry_points(group="vllm.general_plugins"), which
looks for *.dist-info directories on sys.path. Installing the package with pip would change the
interpreter every other test uses; instead each mutant target builds this directory in its own
TEST_TMPDIR and puts it first on the PYTHONPATH of the vLLM servers it starts:

  <dest>/sleepwake_mutants/...                     a copy of tests/mutants/plugin/sleepwake_mutants
  <dest>/sleepwake_mutants-0.1.dist-info/METADATA
  <dest>/sleepwake_mutants-0.1.dist-info/entry_points.txt

No RECORD: nothing ever uninstalls it, and importlib.metadata does not need one.
"""

import os
import shutil

PACKAGE = "sleepwake_mutants"
VERSION = "0.1"
ENTRY_POINT_GROUP = "vllm.general_plugins"
# Next to this file in the source tree and in Bazel's runfiles (abspath keeps the runfiles path).
PLUGIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugin", PACKAGE)

METADATA = f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n"
ENTRY_POINTS = f"[{ENTRY_POINT_GROUP}]\n{PACKAGE} = {PACKAGE}:register\n"


def build(dest: str, package_dir: str = PLUGIN_DIR) -> str:
    """Writes the site into dest (created if missing; an earlier site there is replaced); returns dest."""
    if not os.path.isfile(os.path.join(package_dir, "__init__.py")):
        raise FileNotFoundError(
            f"the plugin package {package_dir} has no __init__.py. Under Bazel the mutant targets get it"
            " through the //tests/mutants:lib library; outside Bazel run from a checkout."
        )
    os.makedirs(dest, exist_ok=True)
    package_copy = os.path.join(dest, PACKAGE)
    dist_info = os.path.join(dest, f"{PACKAGE}-{VERSION}.dist-info")
    for path in (package_copy, dist_info):
        shutil.rmtree(path, ignore_errors=True)
    # Runfiles are symlinks into the source tree; copy contents so the site stands on its own.
    shutil.copytree(package_dir, package_copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    os.makedirs(dist_info)
    for name, text in (("METADATA", METADATA), ("entry_points.txt", ENTRY_POINTS), ("top_level.txt", PACKAGE + "\n")):
        with open(os.path.join(dist_info, name), "w", encoding="utf-8") as f:
            f.write(text)
    return dest


def pythonpath_with(site: str, environ) -> str:
    """PYTHONPATH with the site first, so its copy of the package wins over any other on the path."""
    return os.pathsep.join(p for p in (site, environ.get("PYTHONPATH", "")) if p)
