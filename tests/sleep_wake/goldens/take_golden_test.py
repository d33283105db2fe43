"""take_golden against the fake server: the file it writes is the checkpoint's golden on the cell (the
greedy answers, the walk's seeded sample and its stream), read back only as that checkpoint's, and a
golden it cannot take is one line naming why."""

import os

import pytest

from tests.core import goldens, oracle
from tests.core.prompts import CHECKPOINT_GOLDEN_PROMPTS, GOLDEN_MAX_TOKENS, SEED_N, STREAM_TOKENS
from tests.sleep_wake.goldens import take_golden

FAKE = "tests.sleep_wake.fakes.fake_server"


def _take(tmp_path, checkpoint, name):
    out = str(tmp_path / f"{name}.json")
    code = take_golden.main(
        ["--checkpoint", checkpoint, "--runner", "mrv1", "--mode", "eager", "--out", out, "--server_module", FAKE]
    )
    return code, out


def _read(path, checkpoint):
    return goldens.read(
        path,
        runner="mrv1",
        mode="eager",
        identity=None,
        checkpoint=goldens.checkpoint_name(checkpoint),
        prompts=CHECKPOINT_GOLDEN_PROMPTS,
    )


@pytest.fixture(scope="module")
def taken(tmp_path_factory):
    """checkpoint ("A", "B") -> (its config.json, the golden file take_golden wrote of it)."""
    tmp = tmp_path_factory.mktemp("goldens")
    out = {}
    for name, variable in (("A", "SLEEPWAKE_MODEL"), ("B", "SLEEPWAKE_MODEL_B")):
        code, path = _take(tmp, os.environ[variable], name)
        assert code == 0, f"take_golden of checkpoint {name} failed (its stderr above)"
        out[name] = (os.environ[variable], path)
    return out


def _read_checkpoint(path, checkpoint):
    return goldens.read_checkpoint(
        path, runner="mrv1", mode="eager", identity=None, checkpoint=goldens.checkpoint_name(checkpoint)
    )


def test_the_golden_file_holds_the_walks_seeded_sample_and_stream(taken):
    read = {name: _read_checkpoint(path, checkpoint) for name, (checkpoint, path) in taken.items()}
    for golden in read.values():
        assert list(golden.greedy) == CHECKPOINT_GOLDEN_PROMPTS
        assert len(golden.seeded.token_ids) == SEED_N and golden.seeded.finish_reasons == ["length"] * SEED_N
        assert {len(t) for t in golden.seeded.token_ids} == {GOLDEN_MAX_TOKENS}
        # n choices of one seed differ: the sample is a sample, not n copies of the argmax.
        assert len({tuple(t) for t in golden.seeded.token_ids}) > 1
        assert len(golden.stream.token_ids[0]) == STREAM_TOKENS and golden.stream.finish_reasons == ["length"]
    # Each checkpoint's own, for the walk's every reference.
    assert read["A"].seeded.token_ids != read["B"].seeded.token_ids
    assert read["A"].stream.token_ids != read["B"].stream.token_ids


def test_bs_golden_read_as_as_is_refused(taken):
    checkpoint_a, _ = taken["A"]
    _, path_b = taken["B"]
    with pytest.raises(
        oracle.Precondition,
        match=r"checkpoint 'synthetic_qwen3_small_b', the cell's "
        r"'synthetic_qwen3_small'",
    ):
        _read_checkpoint(path_b, checkpoint_a)


def test_the_golden_file_is_what_the_checkpoint_serves_on_the_cell(taken):
    (a, out_a), (b, out_b) = taken["A"], taken["B"]
    golden_a, golden_b = _read(out_a, a), _read(out_b, b)
    for prompt in CHECKPOINT_GOLDEN_PROMPTS:
        assert len(golden_b[prompt].token_ids[0]) == GOLDEN_MAX_TOKENS
        assert golden_b[prompt].finish_reasons == ["length"]
    # Each checkpoint's own: the weight-sync class's push of B is compared with B's, not A's.
    assert [golden_a[p].token_ids for p in CHECKPOINT_GOLDEN_PROMPTS] != [
        golden_b[p].token_ids for p in CHECKPOINT_GOLDEN_PROMPTS
    ]


def test_a_golden_it_cannot_take_fails_in_one_line_naming_why(tmp_path, capsys):
    code, out = _take(tmp_path, str(tmp_path / "no_such_checkpoint" / "config.json"), "none")
    err = capsys.readouterr().err.strip()
    assert code == 1 and not os.path.exists(out)
    assert err.startswith("take_golden: no golden for ") and "ConfigError" in err and "no_such_checkpoint" in err
    assert len(err.splitlines()) == 1
