"""The stand-in for a module vLLM's server imports only once it runs (its engine core's worker), which a
zygote imports ahead of the fork (zygote.py --preload, ServerConfig.zygote_preload).

FAKE_PRELOAD_IMPORT_LOG: each import appends "PID\n" there, so a test tells the zygote's import from a
server's own. FAKE_PRELOAD_READS_AT_IMPORT=NAME: the import reads variable NAME. cache_key() is a cached
computation, as Triton's triton_key is: each time it computes, it appends "PID\n" to FAKE_PRELOAD_CALL_LOG.
"""

import functools
import os

if os.environ.get("FAKE_PRELOAD_IMPORT_LOG"):
    with open(os.environ["FAKE_PRELOAD_IMPORT_LOG"], "a") as _log:
        _log.write("%d\n" % os.getpid())
if os.environ.get("FAKE_PRELOAD_READS_AT_IMPORT"):
    IMPORTED_WITH = os.environ.get(os.environ["FAKE_PRELOAD_READS_AT_IMPORT"])


@functools.lru_cache
def cache_key() -> str:
    if os.environ.get("FAKE_PRELOAD_CALL_LOG"):
        with open(os.environ["FAKE_PRELOAD_CALL_LOG"], "a") as log:
            log.write("%d\n" % os.getpid())
    return "key"
