"""The stand-in for the vllm package in the zygote's CPU tests: the import a zygote pays once.

STUB_SERVER_IMPORT_LOG: each import appends "PID\n" there, so a test counts imports (one per zygote,
or one per server when started plainly). STUB_SERVER_READS_AT_IMPORT=NAME: the import reads variable
NAME, as importing vLLM reads its logging variables (vllm/logger.py). STUB_SERVER_IMPORT_FAILS=1: the
import then raises, as a broken install would. STATE: HEAVY_OBJECTS small containers of module state.
"""

import os

# Module state, as an import of vLLM leaves 680k objects: enough that a test can tell whether a
# server's collections walk them (the zygote freezes them before it forks).
HEAVY_OBJECTS = 20000
STATE = [{"entry": [i]} for i in range(HEAVY_OBJECTS)]

if os.environ.get("STUB_SERVER_IMPORT_LOG"):
    with open(os.environ["STUB_SERVER_IMPORT_LOG"], "a") as _log:
        _log.write("%d\n" % os.getpid())
if os.environ.get("STUB_SERVER_READS_AT_IMPORT"):
    IMPORTED_WITH = os.environ.get(os.environ["STUB_SERVER_READS_AT_IMPORT"])
if os.environ.get("STUB_SERVER_IMPORT_FAILS") == "1":
    raise RuntimeError("fake_heavy: import failed (STUB_SERVER_IMPORT_FAILS=1)")
