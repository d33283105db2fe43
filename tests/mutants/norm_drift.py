"""The logprob drift the weights_perturbed mutant causes, computed: a float32 numpy forward of the GPU
cells' checkpoint (tools/checkpoints/reference_forward.py) over PROMPTS and their greedy tokens, with the
final norm's weight as the mutant leaves it (sleepwake_mutants/weights.py), against the same forward with
the checkpoint's weight. What it prints is what the logprob oracle measures: the worst |logprob - golden|
of a generated token, over the prompts.

    python3 -m tools.checkpoints.make_synthetic_model --out_dir=/tmp/a --seed=0
    python3 -m tests.mutants.norm_drift /tmp/a [--scale S] [--share F]

(or the checkpoint Bazel builds, bazel-bin/tools/checkpoints/synthetic_qwen3; run from the workspace root with
the venv's python3). --scale and --share size another perturbation than the mutant's; the catalogue's
expected value for weights_perturbed is this drift, and its bound is logprob_drift_max.
"""

import argparse
import os
import sys

import numpy as np
from sleepwake_mutants import weights
from tokenizers import Tokenizer

from tests.core import thresholds
from tests.core.prompts import GOLDEN_MAX_TOKENS, PROMPTS
from tools.checkpoints import make_synthetic_model as msm
from tools.checkpoints import reference_forward

SEED = 0  # checkpoint A, the one the logprobs class serves


def greedy(weight, shape, prompt_ids: list[int], tokens: int) -> list[int]:
    """The prompt and its `tokens` greedy tokens. Causal attention makes one forward over a candidate
    continuation give each position the logits greedy decoding would; the first position whose argmax
    disagrees is fixed and the rest follows it, so the loop ends at the exact greedy continuation (the
    generator's successor table, the first candidate, is it already)."""
    successor = msm.successor_table(SEED, shape.vocab_size)
    ids = list(prompt_ids)
    while len(ids) < len(prompt_ids) + tokens:
        ids.append(int(successor[ids[-1]]))
    for _ in range(tokens):
        chosen = reference_forward.logits(weight, shape, np.array(ids[:-1]))[len(prompt_ids) - 1 :].argmax(-1)
        wrong = np.flatnonzero(chosen != np.array(ids[len(prompt_ids) :]))
        if not wrong.size:
            return ids
        ids[len(prompt_ids) + wrong[0] :] = [int(t) for t in chosen[wrong[0] :]]
    raise RuntimeError(f"no greedy continuation found for {prompt_ids}")


def drift(checkpoint: str, scale: float, share: float) -> dict[str, float]:
    """prompt -> the worst per-token drift of its greedy tokens with the leading `share` of the final norm's
    entries at `scale`; raises if the perturbation changes a greedy token (the oracle compares logprobs
    of the same tokens)."""
    shape = msm.ModelShape()  # the GPU checkpoint's (tools/checkpoints/BUILD.bazel: default flags)
    weight = reference_forward.reader(os.path.join(checkpoint, "model.safetensors"))
    tokenizer = Tokenizer.from_file(os.path.join(checkpoint, "tokenizer.json"))
    norm = np.ones(shape.hidden_size, dtype=np.float32)
    norm[: round(shape.hidden_size * share)] = scale
    out = {}
    for prompt in PROMPTS:
        prompt_ids = tokenizer.encode(prompt).ids
        ids = greedy(weight, shape, prompt_ids, GOLDEN_MAX_TOKENS)
        hidden = reference_forward.final_hidden(weight, shape, np.array(ids[:-1]))[len(prompt_ids) - 1 :]
        chosen = np.array(ids[len(prompt_ids) :])
        golden = reference_forward.logprobs(hidden @ weight("lm_head.weight").T)
        perturbed = reference_forward.logprobs((hidden * norm) @ weight("lm_head.weight").T)
        if not np.array_equal(perturbed.argmax(-1), chosen):
            raise ValueError(f"{prompt!r}: the perturbation changes a greedy token; the oracle would see the tokens")
        at = np.arange(len(chosen))
        out[prompt] = float(np.abs(perturbed[at, chosen] - golden[at, chosen]).max())
    return out


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="the seed-0 synthetic checkpoint's directory (default shape)")
    parser.add_argument("--scale", type=float, default=weights.NORM_SCALE, help="default: the mutant's")
    parser.add_argument("--share", type=float, default=weights.NORM_SCALED_SHARE, help="default: the mutant's")
    args = parser.parse_args(argv[1:])
    by_prompt = drift(args.checkpoint, args.scale, args.share)
    for prompt, value in by_prompt.items():
        print(f"{value:.5f} nats  {prompt!r}")
    worst = max(by_prompt.values())
    bound = thresholds.get("logprob_drift_max")
    print(f"worst {worst:.5f} nats: {worst / bound:.2f}x logprob_drift_max ({bound:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
