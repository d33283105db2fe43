"""The matrix cell a GPU test runs in, read from the environment the matrix macro sets."""

import dataclasses
import os

from tools.matrix import EXECUTION_MODES, RUNNERS, cell_id


@dataclasses.dataclass(frozen=True)
class CellSpec:
    runner: str
    mode: str
    id: str = ""  # pytest id suffix and threshold lookup key, e.g. "MRV1-eager"; derived when empty

    def __post_init__(self):
        expected = cell_id(self.runner, self.mode)
        if not self.id:
            object.__setattr__(self, "id", expected)
        elif self.id != expected:
            raise CellConfigError(f"CellSpec id {self.id!r} does not match runner/mode ({expected!r})")


class CellConfigError(ValueError):
    pass


def cell_from_env(environ=os.environ) -> CellSpec:
    runner = environ.get("SLEEPWAKE_RUNNER", "")
    mode = environ.get("SLEEPWAKE_EXECUTION_MODE", "")
    if runner not in RUNNERS or mode not in EXECUTION_MODES:
        raise CellConfigError(
            f"SLEEPWAKE_RUNNER={runner!r} SLEEPWAKE_EXECUTION_MODE={mode!r}: expected runner in "
            f"{tuple(RUNNERS)} and mode in {EXECUTION_MODES}. GPU cells are run by `bazel test` targets of "
            "sleep_wake_matrix, which set both; outside Bazel export them yourself.")
    return CellSpec(runner, mode)
