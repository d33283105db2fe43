"""The site dir is what vLLM's plugin scan finds: checked with importlib.metadata in a fresh Python."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import sleepwake_mutants

from tests.mutants import site_dir

# Runs in a child whose only extra path is the site: what vLLM's load_plugins_by_group does, then the
# entry point's module location and (when asked) a call of register().
_PROBE = textwrap.dedent("""
    import importlib.metadata, json, sys
    eps = importlib.metadata.entry_points(group="vllm.general_plugins")
    found = [(ep.name, ep.value) for ep in eps]
    func = next(ep for ep in eps if ep.name == "sleepwake_mutants").load()
    if sys.argv[1] == "call":
        func()
    print(json.dumps({"found": found, "file": sys.modules[func.__module__].__file__,
                      "version": importlib.metadata.version("sleepwake_mutants")}))
""")


def _probe(site, call=False):
    env = dict(os.environ, PYTHONPATH=site)
    env.pop(sleepwake_mutants.ENV, None)  # register() then applies nothing (and needs no vLLM)
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, "call" if call else "load"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def test_a_package_is_discovered_and_loaded_from_the_site(tmp_path):
    package = tmp_path / "src" / site_dir.PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("def register():\n    print('registered')\n")
    site = site_dir.build(str(tmp_path / "site"), str(package))
    out, _ = _probe(site)
    assert ("sleepwake_mutants", "sleepwake_mutants:register") in [tuple(f) for f in out["found"]]
    assert out["file"] == os.path.join(site, site_dir.PACKAGE, "__init__.py")
    assert out["version"] == site_dir.VERSION
    # Built again in the same place (a retried test): replaced, still one distribution.
    site_dir.build(site, str(package))
    out, _ = _probe(site)
    assert [tuple(f) for f in out["found"]].count(("sleepwake_mutants", "sleepwake_mutants:register")) == 1


def test_the_real_plugin_loads_without_vllm_and_reports_no_mutant(tmp_path):
    """The control relies on this line: the plugin loaded, nothing applied."""
    site = site_dir.build(str(tmp_path / "site"))
    out, stderr = _probe(site, call=True)
    assert out["file"].startswith(site)
    assert sleepwake_mutants.NO_MUTANT.split("{pid}")[0] in stderr, stderr


def test_a_missing_package_says_where_it_looked(tmp_path):
    with pytest.raises(FileNotFoundError, match="no __init__.py"):
        site_dir.build(str(tmp_path / "site"), str(tmp_path / "nowhere"))


def test_pythonpath_puts_the_site_first():
    assert site_dir.pythonpath_with("/s", {"PYTHONPATH": "/a:/b"}) == os.pathsep.join(["/s", "/a:/b"])
    assert site_dir.pythonpath_with("/s", {}) == "/s"
