"""A golden written to a file reads back as the Completions a live server gave, and only for its own
cell, vLLM build, checkpoint and requests."""

import json

import pytest

from tests.core import goldens, oracle
from tests.core.client import SleepWakeClient
from tests.core.prompts import (
    CHECKPOINT_GOLDEN_PROMPTS,
    GOLDEN_MAX_TOKENS,
    IN_FLIGHT,
    PROMPTS,
    SEED,
    SEED_N,
    SEEDED_PROMPT,
    STREAM_TOKENS,
)
from tests.sleep_wake.fakes.fake_vllm import FakeVllm

CELL = dict(runner="mrv1", mode="eager", identity="vllm 0.26.0 on H200", checkpoint="synthetic_qwen3_b")


@pytest.fixture(scope="module")
def taken():
    with FakeVllm() as fake:
        return goldens.take(SleepWakeClient(fake.url, timeout_s=5))


@pytest.fixture
def path(tmp_path, taken):
    p = str(tmp_path / "golden.json")
    goldens.write(p, taken, served="0.26.0", **CELL)
    return p


def _edit(path, change):
    with open(path, encoding="utf-8") as f:
        body = json.load(f)
    change(body)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(body, f)


def test_reads_back_what_the_server_answered(path, taken):
    read = goldens.read(path, prompts=PROMPTS, **CELL)
    assert list(read) == PROMPTS
    for prompt in PROMPTS:
        assert read[prompt].token_ids == taken.greedy[prompt].token_ids
        assert read[prompt].logprobs == taken.greedy[prompt].logprobs
        assert read[prompt].finish_reasons == ["length"]


def test_the_walks_reader_gives_every_answer_the_file_holds(path, taken):
    read = goldens.read_checkpoint(path, **CELL)
    assert list(read.greedy) == CHECKPOINT_GOLDEN_PROMPTS
    assert [read.greedy[p].token_ids for p in read.greedy] == [taken.greedy[p].token_ids for p in taken.greedy]
    assert read.seeded.token_ids == taken.seeded.token_ids and len(read.seeded.token_ids) == SEED_N
    assert {len(t) for t in read.seeded.token_ids} == {GOLDEN_MAX_TOKENS}
    assert read.stream.token_ids == taken.stream.token_ids and len(read.stream.token_ids[0]) == STREAM_TOKENS


def test_the_extra_requests_are_the_walks_as_sent(path):
    with open(path, encoding="utf-8") as f:
        requests = json.load(f)["requests"]
    assert requests == {
        "seeded": {
            "prompt": SEEDED_PROMPT,
            "max_tokens": GOLDEN_MAX_TOKENS,
            "temperature": 1.0,
            "seed": SEED,
            "n": SEED_N,
        },
        "stream": {"prompt": IN_FLIGHT, "max_tokens": STREAM_TOKENS},
    }


@pytest.mark.parametrize(
    "field,value",
    [("runner", "mrv2"), ("mode", "graph"), ("identity", "vllm 0.25.0 on H200"), ("checkpoint", "synthetic_qwen3")],
)
@pytest.mark.parametrize("reader", ["read", "read_checkpoint"])
def test_another_cells_golden_is_a_precondition_failure(path, field, value, reader):
    extra = {"prompts": PROMPTS} if reader == "read" else {}
    with pytest.raises(oracle.Precondition, match=f"{field} .*, the cell's '{value}'"):
        getattr(goldens, reader)(path, **extra, **dict(CELL, **{field: value}))


def test_a_golden_of_the_previous_format_says_rebuild(path):
    _edit(path, lambda body: body.update(format=1))
    with pytest.raises(oracle.Precondition, match="format 1, this suite reads 2; rebuild it"):
        goldens.read_checkpoint(path, **CELL)


def test_a_golden_of_other_requests_is_refused(path):
    _edit(path, lambda body: body["requests"]["seeded"].update(seed=SEED + 1))
    with pytest.raises(oracle.Precondition, match=r"this suite sends .*tests/core/prompts.py\); rebuild it"):
        goldens.read_checkpoint(path, **CELL)


def test_a_cut_answer_is_refused(path):
    _edit(path, lambda body: body["stream"]["choices"][0].update(finish_reason="abort"))
    with pytest.raises(oracle.Precondition, match=f"stream answer holds .*expected 1 x {STREAM_TOKENS}"):
        goldens.read_checkpoint(path, **CELL)


def test_a_prompt_the_golden_lacks_is_named(path):
    with pytest.raises(oracle.Precondition, match="no answer for .*a prompt it never saw"):
        goldens.read(path, prompts=PROMPTS + ["a prompt it never saw"], **CELL)


def test_an_unreadable_golden_says_how_to_rebuild(tmp_path):
    bad = tmp_path / "golden.json"
    bad.write_text("{not json")
    with pytest.raises(oracle.Precondition, match="bazel build //tests/sleep_wake/goldens:all"):
        goldens.read(str(bad), prompts=PROMPTS, **CELL)


def test_the_golden_of_a_checkpoint_comes_from_its_variable():
    assert goldens.env_path("A", {"SLEEPWAKE_GOLDEN_A": "a.json", "SLEEPWAKE_GOLDEN_B": "b.json"}) == "a.json"
    with pytest.raises(oracle.Precondition, match="SLEEPWAKE_GOLDEN_B is unset: .*GOLDEN_CLASSES"):
        goldens.env_path("B", {"SLEEPWAKE_GOLDEN_A": "a.json"})


def test_checkpoint_name_from_its_dir_or_config(tmp_path):
    ckpt = tmp_path / "synthetic_qwen3_b"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    name = "synthetic_qwen3_b"
    assert goldens.checkpoint_name(str(ckpt)) == goldens.checkpoint_name(str(ckpt / "config.json")) == name
