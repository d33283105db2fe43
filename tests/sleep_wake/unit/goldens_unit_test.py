"""A golden written to a file reads back as the Completions a live server gave, and only for its own
cell, vLLM build and checkpoint."""

import pytest

from tests.sleep_wake.fakes.fake_vllm import FakeVllm
from tests.sleep_wake.lib import expect, goldens, oracle
from tests.sleep_wake.lib.client import SleepWakeClient
from tests.sleep_wake.lib.prompts import PROMPTS

CELL = dict(runner="mrv1", mode="eager", identity="vllm 0.26.0 on H200", checkpoint="synthetic_qwen3_b")


@pytest.fixture(scope="module")
def taken():
    with FakeVllm() as fake:
        return expect.take_golden(SleepWakeClient(fake.url, timeout_s=5), PROMPTS)


@pytest.fixture
def path(tmp_path, taken):
    p = str(tmp_path / "golden.json")
    goldens.write(p, taken, served="0.26.0", **CELL)
    return p


def test_reads_back_what_the_server_answered(path, taken):
    read = goldens.read(path, prompts=PROMPTS, **CELL)
    assert list(read) == PROMPTS
    for prompt in PROMPTS:
        assert read[prompt].token_ids == taken[prompt].token_ids
        assert read[prompt].logprobs == taken[prompt].logprobs
        assert read[prompt].finish_reasons == ["length"]


@pytest.mark.parametrize("field,value", [("runner", "mrv2"), ("mode", "graph"), ("identity", "vllm 0.25.0 on H200"),
                                         ("checkpoint", "synthetic_qwen3")])
def test_another_cells_golden_is_a_precondition_failure(path, field, value):
    with pytest.raises(oracle.Precondition, match=f"{field} .*, the cell's '{value}'"):
        goldens.read(path, prompts=PROMPTS, **dict(CELL, **{field: value}))


def test_a_prompt_the_golden_lacks_is_named(path):
    with pytest.raises(oracle.Precondition, match="no answer for .*a prompt it never saw"):
        goldens.read(path, prompts=PROMPTS + ["a prompt it never saw"], **CELL)


def test_an_unreadable_golden_says_how_to_rebuild(tmp_path):
    bad = tmp_path / "golden.json"
    bad.write_text("{not json")
    with pytest.raises(oracle.Precondition, match="bazel build //tests/sleep_wake/goldens:all"):
        goldens.read(str(bad), prompts=PROMPTS, **CELL)


def test_checkpoint_name_from_its_dir_or_config(tmp_path):
    ckpt = tmp_path / "synthetic_qwen3_b"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    name = "synthetic_qwen3_b"
    assert goldens.checkpoint_name(str(ckpt)) == goldens.checkpoint_name(str(ckpt / "config.json")) == name
