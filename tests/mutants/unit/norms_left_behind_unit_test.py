"""push_skips_norms against the checkpoints Bazel builds, computed on the CPU (tools/checkpoints/reference_forward.py,
float32): checkpoint B's matrices with A's norm weights, what the mutant serves after a push of B into an intact
pool, keeps every greedy token of the golden prompts and moves their logprobs past logprob_drift_max, so the
weight-sync oracle (token ids and logprobs against B's golden) sees it through the logprobs alone."""

import os

import numpy as np

from tests.core import thresholds
from tests.core.prompts import CHECKPOINT_GOLDEN_PROMPTS, GOLDEN_MAX_TOKENS
from tools.checkpoints import make_synthetic_model as msm
from tools.checkpoints import reference_forward

A, B = "tools/checkpoints/synthetic_qwen3", "tools/checkpoints/synthetic_qwen3_b"
B_SEED = 1  # tools/checkpoints/BUILD.bazel
FILE = "model.safetensors"


def test_b_with_the_norm_weights_of_a_moves_logprobs_past_the_bound_and_keeps_the_tokens():
    from tokenizers import Tokenizer

    shape = msm.ModelShape()  # the GPU checkpoints' (the generator's defaults)
    weight_a = reference_forward.reader(os.path.join(A, FILE))
    weight_b = reference_forward.reader(os.path.join(B, FILE))

    def mutated(name: str) -> np.ndarray:
        return weight_a(name) if weight_b(name).ndim == 1 else weight_b(name)

    tokenizer = Tokenizer.from_file(os.path.join(B, "tokenizer.json"))
    successor = msm.successor_table(B_SEED, shape.vocab_size)
    worst = 0.0
    for prompt in CHECKPOINT_GOLDEN_PROMPTS:
        ids = tokenizer.encode(prompt).ids
        n = len(ids)
        while len(ids) < n + GOLDEN_MAX_TOKENS:
            ids.append(int(successor[ids[-1]]))
        chosen, at = np.array(ids[n:]), np.arange(GOLDEN_MAX_TOKENS)
        golden = reference_forward.logprobs(reference_forward.logits(weight_b, shape, np.array(ids[:-1]))[n - 1 :])
        served = reference_forward.logprobs(reference_forward.logits(mutated, shape, np.array(ids[:-1]))[n - 1 :])
        assert np.array_equal(golden.argmax(-1), chosen), f"{prompt!r}: B's greedy tokens are not its successors"
        assert np.array_equal(served.argmax(-1), chosen), f"{prompt!r}: the mutant changes a token"
        worst = max(worst, float(np.abs(served[at, chosen] - golden[at, chosen]).max()))
    bound = thresholds.get("logprob_drift_max")
    assert worst > bound, (
        f"B with A's norm weights drifts at most {worst:.4f} nats from B's logprobs, within logprob_drift_max "
        f"{bound}: a push that leaves the norm weights behind passes; widen B's norm spread (BUILD.bazel _B_FLAGS)"
    )
