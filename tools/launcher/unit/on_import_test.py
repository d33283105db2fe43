"""sleepwake_on_import, which both of the launcher's vLLM plugins patch the engine core's worker through:
each plugin's patch runs once the module executes, whichever registered first."""

import os
import subprocess
import sys
import textwrap

from tools.launcher.phase_plugin import sleepwake_on_import

_DRIVER = textwrap.dedent("""
    import json, sys
    from sleepwake_on_import import PatchOnImport, patch_when_imported
    seen = []
    patch_when_imported("late_module", lambda m: seen.append(("memory_phase", m.VALUE)), key="memory_phase")
    patch_when_imported("late_module", lambda m: seen.append(("again", m.VALUE)), key="memory_phase")
    patch_when_imported("late_module", lambda m: seen.append(("cpu_use", m.VALUE)), key="cpu_use")
    finders = [f for f in sys.meta_path if isinstance(f, PatchOnImport)]
    import late_module
    import early_module
    patch_when_imported("early_module", lambda m: seen.append(("now", m.VALUE)), key="cpu_use")
    print(json.dumps({"seen": seen, "finders": len(finders)}))
""")


def test_every_plugin_patches_a_module_imported_after_they_registered(tmp_path):
    for name in ("late_module", "early_module"):
        (tmp_path / f"{name}.py").write_text(f"VALUE = {name!r}\n")
    path = [os.path.dirname(sleepwake_on_import.__file__), str(tmp_path)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    run = subprocess.run([sys.executable, "-c", _DRIVER], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == (
        '{"seen": [["memory_phase", "late_module"], ["cpu_use", "late_module"], ["now", "early_module"]], "finders": 1}'
    )
