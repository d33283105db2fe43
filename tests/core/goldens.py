"""A checkpoint's golden as a file: what a fresh server of one cell (runner x mode x vLLM build) on one
checkpoint serves, written once by a cached Bazel action (tests/sleep_wake/goldens) and read by every
cell that needs it, so a matrix starts that server once and a re-run never. Taken from a server started
on that checkpoint, never from one a checkpoint was pushed into: a push that loads the wrong bytes the
same way every time must not become the expectation it is judged by.

The file keeps each request's /v1/completions body as the server answered it; reading parses it the way
a live answer is parsed (client.parse_completion), so a golden from a file and one taken in a test compare
the same. It holds the greedy completions of CHECKPOINT_GOLDEN_PROMPTS (the weight-sync class and the
walk), and the state walk's seeded sample and uninterrupted stream (their parameters in prompts.py,
recorded in the file and checked on reading, so a golden of other requests is refused, not compared)."""

import dataclasses
import json
import os

from tests.core import expect, oracle
from tests.core.client import Completion, parse_completion
from tests.core.prompts import (
    CHECKPOINT_GOLDEN_PROMPTS,
    GOLDEN_MAX_TOKENS,
    IN_FLIGHT,
    SEED,
    SEED_N,
    SEEDED_PROMPT,
    SEEDED_TEMPERATURE,
    STREAM_TOKENS,
)

# 2: the seeded sample and the stream beside the greedy answers.
FORMAT = 2

# The variable each cell that compares with a checkpoint's golden finds its file in (tools/defs.bzl
# cell_goldens sets it to the golden of the cell's runner x mode), by checkpoint.
ENV = {"A": "SLEEPWAKE_GOLDEN_A", "B": "SLEEPWAKE_GOLDEN_B"}

# The two extra requests as sent (client.complete's keywords) and as recorded in the file.
SEEDED_REQUEST = {
    "prompt": SEEDED_PROMPT,
    "max_tokens": GOLDEN_MAX_TOKENS,
    "temperature": SEEDED_TEMPERATURE,
    "seed": SEED,
    "n": SEED_N,
}
STREAM_REQUEST = {"prompt": IN_FLIGHT, "max_tokens": STREAM_TOKENS}
# Their answers' shapes: (choices, tokens each).
_SHAPES = {"seeded": (SEED_N, GOLDEN_MAX_TOKENS), "stream": (1, STREAM_TOKENS)}


@dataclasses.dataclass(frozen=True)
class CheckpointGolden:
    """What a fresh server on one checkpoint serves on one cell."""

    greedy: dict  # prompt -> Completion (GOLDEN_MAX_TOKENS tokens, logprobs) for CHECKPOINT_GOLDEN_PROMPTS
    seeded: Completion  # SEEDED_REQUEST: SEED_N choices
    stream: Completion  # STREAM_REQUEST: one choice of STREAM_TOKENS tokens


def checkpoint_name(path: str) -> str:
    """A checkpoint's name in a golden file: its directory's (synthetic_qwen3_b), from the dir or its
    config.json."""
    path = os.path.abspath(path)
    return os.path.basename(path if os.path.isdir(path) else os.path.dirname(path))


def env_path(checkpoint: str, environ=None) -> str:
    """The golden file of checkpoint "A" or "B" the matrix gave this cell (ENV); a Precondition naming
    how to get one when it is unset."""
    name = ENV[checkpoint]
    path = (os.environ if environ is None else environ).get(name)
    if not path:
        raise oracle.Precondition(
            f"{name} is unset: the matrix sets it for the classes of tools/matrix.bzl GOLDEN_CLASSES "
            f"(tools/defs.bzl cell_goldens); outside Bazel write one with python -m "
            f"tests.sleep_wake.goldens.take_golden on checkpoint {checkpoint} and export its path"
        )
    return path


def _cut_short(what: str, c: Completion) -> str | None:
    """Why c is not the whole answer of the `what` request (_SHAPES; every request is sent with
    ignore_eos), or None."""
    n, max_tokens = _SHAPES[what]
    lengths = [len(t) for t in c.token_ids]
    if lengths != [max_tokens] * n or c.finish_reasons != ["length"] * n:
        return f"{lengths} tokens ending {c.finish_reasons}, expected {n} x {max_tokens} ending by length"
    return None


def take(client) -> CheckpointGolden:
    """Every answer the file holds, from the server behind client, each checked to be whole (a
    Precondition: a cut answer is no reference)."""
    greedy = expect.take_golden(client, CHECKPOINT_GOLDEN_PROMPTS)
    seeded = client.complete(**SEEDED_REQUEST)
    stream = client.complete(**STREAM_REQUEST)
    for what, c in (("seeded", seeded), ("stream", stream)):
        short = _cut_short(what, c)
        if short:
            raise oracle.Precondition(f"golden run of the {what} request: {short}")
    return CheckpointGolden(greedy, seeded, stream)


def write(
    path: str, golden: CheckpointGolden, *, runner: str, mode: str, checkpoint: str, identity: str | None, served: str
) -> None:
    body = {
        "format": FORMAT,
        "runner": runner,
        "mode": mode,
        "checkpoint": checkpoint,
        "identity": identity,
        "served": served,
        "answers": {prompt: c.raw for prompt, c in golden.greedy.items()},
        "seeded": golden.seeded.raw,
        "stream": golden.stream.raw,
        "requests": {"seeded": SEEDED_REQUEST, "stream": STREAM_REQUEST},
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(body, f, indent=1, sort_keys=True)
        f.write("\n")


def _load(path: str, *, runner: str, mode: str, identity: str | None, checkpoint: str) -> dict:
    """The file's body, checked to be this suite's format and this cell's: a golden of another runner,
    mode, vLLM build or checkpoint would fail the cell's output oracles for the wrong reason (a
    Precondition)."""
    try:
        with open(path, encoding="utf-8") as f:
            body = json.load(f)
    except (OSError, ValueError) as e:
        raise oracle.Precondition(
            f"cannot read the golden {path} ({e}); rebuild it: bazel build //tests/sleep_wake/goldens:all"
        ) from e
    if body.get("format") != FORMAT:
        raise oracle.Precondition(
            f"the golden {path} has format {body.get('format')!r}, this suite reads {FORMAT}; rebuild it"
        )
    want = {"runner": runner, "mode": mode, "identity": identity, "checkpoint": checkpoint}
    wrong = {k: (body.get(k), v) for k, v in want.items() if body.get(k) != v}
    if wrong:
        raise oracle.Precondition(
            f"the golden {path} was taken on another cell, vLLM build or checkpoint: "
            + "; ".join(f"{k} {got!r}, the cell's {need!r}" for k, (got, need) in sorted(wrong.items()))
            + f"; the cell's {' or '.join(ENV.values())} must name the golden of its own runner x mode "
            "and checkpoint (tools/defs.bzl cell_goldens)"
        )
    return body


def _greedy(path: str, body: dict, prompts) -> dict:
    missing = [p for p in prompts if p not in body["answers"]]
    if missing:
        raise oracle.Precondition(f"the golden {path} has no answer for {missing}; rebuild it")
    return {p: parse_completion(body["answers"][p], want_logprobs=True) for p in prompts}


def read(path: str, *, runner: str, mode: str, identity: str | None, checkpoint: str, prompts) -> dict:
    """prompt -> Completion from a golden file, checked to be this cell's and checkpoint's."""
    return _greedy(path, _load(path, runner=runner, mode=mode, identity=identity, checkpoint=checkpoint), prompts)


def read_checkpoint(path: str, *, runner: str, mode: str, identity: str | None, checkpoint: str) -> CheckpointGolden:
    """Everything a golden file holds (the state walk's references), checked as read() checks, and its
    seeded and stream answers checked to be of the requests this suite sends, whole."""
    body = _load(path, runner=runner, mode=mode, identity=identity, checkpoint=checkpoint)
    want = {"seeded": SEEDED_REQUEST, "stream": STREAM_REQUEST}
    if body.get("requests") != want:
        raise oracle.Precondition(
            f"the golden {path} answers the requests {body.get('requests')!r}, this "
            f"suite sends {want!r} (tests/core/prompts.py); rebuild it"
        )
    seeded, stream = parse_completion(body["seeded"]), parse_completion(body["stream"])
    for what, c in (("seeded", seeded), ("stream", stream)):
        short = _cut_short(what, c)
        if short:
            raise oracle.Precondition(f"the golden {path}'s {what} answer holds {short}; rebuild it")
    return CheckpointGolden(_greedy(path, body, CHECKPOINT_GOLDEN_PROMPTS), seeded, stream)
