"""The checkout a static check reads, and how it runs a checker there.

Why the checkout and not the test's runfiles: Bazel's glob stops at every package's BUILD file, so no
one target can list each Python, BUILD and .bzl file of the tree, and a file a new package forgot to
list would go unchecked. So ruff and buildifier walk the checkout from its root, as they do when run
there by hand, with the same config files. The test finds the checkout through a runfile (the config
file, a symlink back into the source tree). Such a test is tagged local (it reads outside its sandbox,
so it cannot run remotely) and external (its input is the whole tree, so it is never cached; each
check takes about a second).
"""

from __future__ import annotations

import os
import subprocess


class CheckoutNotFound(Exception):
    pass


def root(anchor: str) -> str:
    """The checkout holding `anchor`, a file at its root that is in this test's runfiles."""
    if not os.path.exists(anchor):
        raise CheckoutNotFound(f"{anchor} is not in this test's runfiles (cwd {os.getcwd()}): add it to data")
    found = os.path.dirname(os.path.realpath(anchor))
    if not os.path.isfile(os.path.join(found, "WORKSPACE")):
        raise CheckoutNotFound(
            f"{anchor} resolves to {found}, which holds no WORKSPACE: the runfiles are"
            " copies, not links to the checkout (run without --noenable_runfiles)"
        )
    return found


def run(argv: list[str], cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300)
