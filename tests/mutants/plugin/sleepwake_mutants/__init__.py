"""Mutants of vLLM 0.26.0's sleep mode: each re-introduces one catalogued bug, as a vLLM general plugin.

vLLM loads every `vllm.general_plugins` entry point in each of its processes (API server, engine core,
workers), so a patch applied by `register()` is live wherever the real code runs; no file of vLLM is
edited. The mutant is chosen per server by the SLEEPWAKE_MUTANT environment variable, which the
server inherits from the test. Every process that applies one prints ACTIVATION to stderr (the
server log), and REACHED at the first call of a patched function (shared.py), so a harness can tell
"killed by the suite" from "never applied" and from "applied where no test went".

The catalogue (MUTANTS) is catalogue.py; this package re-exports its names, which the harness reads as
sleepwake_mutants.MUTANTS, .ACTIVATION and so on, and holds register(), the entry point.
"""

import os
import sys

from .catalogue import (  # noqa: F401  (the catalogue's names, read as sleepwake_mutants.<name>)
    ACTIVATION,
    ENV,
    ERROR_ANSWER,
    HANG,
    HTTP,
    MUTANTS,
    NO_MUTANT,
    REACHED,
    GiB,
    KiB,
    MiB,
    Mutant,
)

_applied: list[str | None] = []  # register() may run several times per process (vLLM loads plugins from several places)


def register() -> None:
    """The vllm.general_plugins entry point: apply the mutant named by SLEEPWAKE_MUTANT, once."""
    if _applied:
        return
    name = os.environ.get(ENV, "none")
    if name in ("", "none"):
        _applied.append(None)
        print(NO_MUTANT.format(pid=os.getpid()), file=sys.stderr, flush=True)
        return
    if name not in MUTANTS:
        raise ValueError(f"{ENV}={name!r} names no mutant; known: {', '.join(sorted(MUTANTS))}")
    MUTANTS[name].apply()
    _applied.append(name)
    print(ACTIVATION.format(name=name, pid=os.getpid()), file=sys.stderr, flush=True)
