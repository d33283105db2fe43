"""The checkpoints Bazel builds, as the weight-sync classes push one over the other: B differs from A in every
tensor, so a push that leaves any tensor behind (the norm weights, say) cannot serve B's output; and B keeps
the generator's greedy design (the successor table, a wide top-1 margin) with its seeded norm weights."""

import os

import numpy as np
import pytest

from tools.checkpoints import bf16_safetensors, reference_forward
from tools.checkpoints import make_synthetic_model as msm

PAIRS = [
    ("tools/checkpoints/synthetic_qwen3", "tools/checkpoints/synthetic_qwen3_b"),
    ("tools/checkpoints/synthetic_qwen3_small", "tools/checkpoints/synthetic_qwen3_small_b"),
]
FILE = "model.safetensors"
B_SEED = 1  # tools/checkpoints/BUILD.bazel
BF16_NOISE_LOGITS = 0.06  # a logit's bf16 rounding at the GPU checkpoint's scale (make_synthetic_model.py)


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_b_differs_from_a_in_every_tensor(a, b):
    digests_a = bf16_safetensors.tensor_digests(os.path.join(a, FILE))
    digests_b = bf16_safetensors.tensor_digests(os.path.join(b, FILE))
    assert digests_a.keys() == digests_b.keys()
    same = sorted(name for name in digests_a if digests_a[name] == digests_b[name])
    assert not same, (
        f"{b} holds the same bytes as {a} in {len(same)} tensors ({same[:4]} ...): a push that leaves those "
        "behind serves B's output unchanged, so no oracle sees it; give B other values there (BUILD.bazel _B_FLAGS)"
    )


def test_b_greedy_is_its_successor_with_a_margin_far_above_bf16_noise():
    shape = msm.ModelShape()  # the GPU checkpoint's: the generator's defaults
    weight = reference_forward.reader(os.path.join(PAIRS[0][1], FILE))
    ids = np.random.default_rng(7).integers(msm.PAD_ID + 1, shape.vocab_size, 64)
    logits = reference_forward.logits(weight, shape, ids)
    assert np.array_equal(logits.argmax(-1), msm.successor_table(B_SEED, shape.vocab_size)[ids])
    top2 = np.sort(logits, axis=-1)[:, -2:]
    # 10x the noise: a one-ulp difference between eager and graph runs, or batch shapes, never flips a token.
    assert (top2[:, 1] - top2[:, 0]).min() > 10 * BF16_NOISE_LOGITS
