"""A checkpoint's golden as a file: what a fresh server of one cell (runner x mode x vLLM build) serves
for a set of prompts, written once by a cached Bazel action (tests/sleep_wake/goldens) and read by every
cell that needs it, so a matrix starts that server once and a re-run never.

The file keeps each prompt's /v1/completions body as the server answered it; reading parses it the way a
live answer is parsed (client.parse_completion), so a golden from a file and one taken in a test compare
the same."""

import json
import os

from tests.sleep_wake.lib import oracle
from tests.sleep_wake.lib.client import parse_completion

FORMAT = 1


def checkpoint_name(path: str) -> str:
    """A checkpoint's name in a golden file: its directory's (synthetic_qwen3_b), from the dir or its
    config.json."""
    path = os.path.abspath(path)
    return os.path.basename(path if os.path.isdir(path) else os.path.dirname(path))


def write(path: str, golden: dict, *, runner: str, mode: str, checkpoint: str, identity: str | None,
          served: str) -> None:
    """golden: prompt -> Completion (expect.take_golden)."""
    body = {"format": FORMAT, "runner": runner, "mode": mode, "checkpoint": checkpoint, "identity": identity,
            "served": served, "answers": {prompt: c.raw for prompt, c in golden.items()}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(body, f, indent=1, sort_keys=True)
        f.write("\n")


def read(path: str, *, runner: str, mode: str, identity: str | None, checkpoint: str, prompts) -> dict:
    """prompt -> Completion from a golden file, checked to be this cell's: a golden of another runner,
    mode or vLLM build would fail the cell's output oracles for the wrong reason (a Precondition)."""
    try:
        with open(path, encoding="utf-8") as f:
            body = json.load(f)
    except (OSError, ValueError) as e:
        raise oracle.Precondition(f"cannot read the golden {path} ({e}); rebuild it: bazel build "
                                  "//tests/sleep_wake/goldens:all") from e
    if body.get("format") != FORMAT:
        raise oracle.Precondition(f"the golden {path} has format {body.get('format')!r}, this suite reads "
                                  f"{FORMAT}; rebuild it")
    want = {"runner": runner, "mode": mode, "identity": identity, "checkpoint": checkpoint}
    wrong = {k: (body.get(k), v) for k, v in want.items() if body.get(k) != v}
    if wrong:
        raise oracle.Precondition(
            f"the golden {path} was taken on another cell or vLLM build: "
            + "; ".join(f"{k} {got!r}, the cell's {need!r}" for k, (got, need) in sorted(wrong.items()))
            + "; the cell's SLEEPWAKE_GOLDEN_B must name its own checkpoint B golden (tools/defs.bzl)")
    missing = [p for p in prompts if p not in body["answers"]]
    if missing:
        raise oracle.Precondition(f"the golden {path} has no answer for {missing}; rebuild it")
    return {p: parse_completion(body["answers"][p], want_logprobs=True) for p in prompts}
