"""take_golden against the fake server: the file it writes is the checkpoint's golden on the cell, and a
golden it cannot take is one line naming why."""

import os

from tests.sleep_wake.goldens import take_golden
from tests.sleep_wake.lib import goldens
from tests.sleep_wake.lib.prompts import CHECKPOINT_GOLDEN_PROMPTS, GOLDEN_MAX_TOKENS

FAKE = "tests.sleep_wake.fakes.fake_server"


def _take(tmp_path, checkpoint, name):
    out = str(tmp_path / f"{name}.json")
    code = take_golden.main(["--checkpoint", checkpoint, "--runner", "mrv1", "--mode", "eager", "--out", out,
                             "--server_module", FAKE])
    return code, out


def _read(path, checkpoint):
    return goldens.read(path, runner="mrv1", mode="eager", identity=None,
                        checkpoint=goldens.checkpoint_name(checkpoint), prompts=CHECKPOINT_GOLDEN_PROMPTS)


def test_the_golden_file_is_what_the_checkpoint_serves_on_the_cell(tmp_path):
    a, b = os.environ["SLEEPWAKE_MODEL"], os.environ["SLEEPWAKE_MODEL_B"]
    code_a, out_a = _take(tmp_path, a, "a")
    code_b, out_b = _take(tmp_path, b, "b")
    assert code_a == code_b == 0
    golden_a, golden_b = _read(out_a, a), _read(out_b, b)
    for prompt in CHECKPOINT_GOLDEN_PROMPTS:
        assert len(golden_b[prompt].token_ids[0]) == GOLDEN_MAX_TOKENS
        assert golden_b[prompt].finish_reasons == ["length"]
    # Each checkpoint's own: the weight-sync class's push of B is compared with B's, not A's.
    assert [golden_a[p].token_ids for p in CHECKPOINT_GOLDEN_PROMPTS] != [
        golden_b[p].token_ids for p in CHECKPOINT_GOLDEN_PROMPTS]


def test_a_golden_it_cannot_take_fails_in_one_line_naming_why(tmp_path, capsys):
    code, out = _take(tmp_path, str(tmp_path / "no_such_checkpoint" / "config.json"), "none")
    err = capsys.readouterr().err.strip()
    assert code == 1 and not os.path.exists(out)
    assert err.startswith("take_golden: no golden for ") and "ConfigError" in err and "no_such_checkpoint" in err
    assert len(err.splitlines()) == 1
