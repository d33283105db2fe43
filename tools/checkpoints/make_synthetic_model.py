"""Writes a deterministic, seeded synthetic Qwen3 checkpoint (config, bf16 weights, tokenizer).

Usage: make_synthetic_model --out_dir=DIR [--seed=0] [size flags]

The checkpoint loads in vLLM's Qwen3ForCausalLM like a real one but needs no download. Its weights
are built so that greedy decoding is robust to numeric noise (see `_lm_head_chunks`): tests compare
outputs across sleep/wake, eager vs CUDA graphs and batch shapes, and a near-tie between the two
best logits would flip under a one-ulp bf16 difference and make such comparisons flaky.
"""

import dataclasses
import json
import math
import os
import sys
import zlib
from collections.abc import Iterator

import numpy as np
from absl import app, flags

if not __package__:
    # Run as a plain script (python tools/checkpoints/make_synthetic_model.py): make the workspace root,
    # which holds the `tools` package, importable as it is under Bazel.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tools.checkpoints import bf16_safetensors, word_tokenizer

# Special token ids, fixed by word_tokenizer.SPECIAL_TOKENS.
UNK_ID, BOS_ID, EOS_ID, PAD_ID = 0, 1, 2, 3
_CHUNK_ELEMENTS = 1 << 23  # Even, so chunking never splits one 64-bit random draw.
EMBEDDING_STD = 1.0


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """The architecture numbers that end up in config.json."""

    hidden_size: int = 1536
    intermediate_size: int = 4096
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    num_key_value_heads: int = 4
    head_dim: int = 128
    vocab_size: int = 32000
    max_position_embeddings: int = 4096
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1000000.0

    def validate(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_key_value_heads={self.num_key_value_heads} must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.vocab_size < word_tokenizer.MIN_VOCAB_SIZE:
            raise ValueError(
                f"vocab_size={self.vocab_size} cannot hold the tokenizer's "
                f"{word_tokenizer.MIN_VOCAB_SIZE} fixed tokens; use at least that many"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for rotary embeddings")
        for field in dataclasses.fields(self):
            if getattr(self, field.name) <= 0:
                raise ValueError(f"{field.name} must be positive, got {getattr(self, field.name)}")


FLAGS = flags.FLAGS
_DEFAULT = ModelShape()
flags.DEFINE_string("out_dir", None, "Directory to write the checkpoint into (created if missing).")
flags.DEFINE_integer("seed", 0, "Seed of all weights; the same seed gives byte-identical files.")
flags.DEFINE_integer("hidden_size", _DEFAULT.hidden_size, "Model width.")
flags.DEFINE_integer("intermediate_size", _DEFAULT.intermediate_size, "MLP inner width.")
flags.DEFINE_integer("num_hidden_layers", _DEFAULT.num_hidden_layers, "Number of decoder layers.")
flags.DEFINE_integer("num_attention_heads", _DEFAULT.num_attention_heads, "Query heads per layer.")
flags.DEFINE_integer(
    "num_key_value_heads",
    _DEFAULT.num_key_value_heads,
    "Key/value heads per layer (GQA); must divide num_attention_heads.",
)
flags.DEFINE_integer("head_dim", _DEFAULT.head_dim, "Width of one attention head.")
flags.DEFINE_integer(
    "vocab_size",
    _DEFAULT.vocab_size,
    f"Vocabulary size of both the model and the tokenizer (at least {word_tokenizer.MIN_VOCAB_SIZE}).",
)
flags.DEFINE_integer(
    "max_position_embeddings",
    _DEFAULT.max_position_embeddings,
    "Longest context the config allows; also the tokenizer's model_max_length.",
)
flags.DEFINE_float(
    "successor_gain",
    0.5,
    "Share (0..1] of each lm_head row that is the embedding of the token leading to "
    "it; the rest is noise. 1 makes the greedy token near-certain (logprob ~0); "
    "lower values make its logprob context-dependent but shrink the top-1 margin.",
)
flags.DEFINE_float(
    "logit_std",
    2.0,
    "Std of the logits of tokens other than the greedy choice. At the default size "
    "the greedy choice scores ~18 of these and beats the runner-up by >= 8 (see "
    "_lm_head_chunks).",
)
flags.DEFINE_float(
    "norm_spread",
    0.0,
    "Half-width of the seeded spread of every RMSNorm weight around 1 (uniform on [1-s, 1+s]); 0 writes "
    "them all 1.0. A checkpoint pushed over another must differ from it in its 1-D tensors too, or a push "
    "that leaves them behind serves the pushed checkpoint's output unchanged.",
)


# A few MB; for CPU tests of the generator and of code that only reads the files.
TINY = ModelShape(
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    vocab_size=2048,
    max_position_embeddings=4096,
)


def config_json(shape: ModelShape) -> dict:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS_ID,
        "dtype": "bfloat16",
        "eos_token_id": EOS_ID,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "hidden_size": shape.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": shape.intermediate_size,
        "max_position_embeddings": shape.max_position_embeddings,
        "max_window_layers": shape.num_hidden_layers,
        "model_type": "qwen3",
        "num_attention_heads": shape.num_attention_heads,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_key_value_heads": shape.num_key_value_heads,
        "pad_token_id": PAD_ID,
        "rms_norm_eps": shape.rms_norm_eps,
        # Both spellings: transformers 5 reads rope_parameters, older readers rope_theta.
        "rope_parameters": {"rope_theta": shape.rope_theta, "rope_type": "default"},
        "rope_theta": shape.rope_theta,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": shape.vocab_size,
    }


def generation_config_json() -> dict:
    # No temperature/top_p/top_k here: vLLM turns those into request defaults.
    return {"bos_token_id": BOS_ID, "do_sample": False, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}


def _bit_generator(seed: int, stream: str) -> np.random.PCG64:
    # One independent stream per tensor name, so a tensor's values do not depend on the sizes or
    # order of the others. Only the PCG64 bit stream and SeedSequence are used: numpy promises those
    # stay the same across versions and platforms, unlike Generator's distribution methods.
    return np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(zlib.crc32(stream.encode()),)))


def _uniform_bf16_chunks(seed: int, stream: str, count: int, std: float) -> Iterator[np.ndarray]:
    """Yields `count` bf16 values, uniform on [-a, a] with a = std*sqrt(3), in chunks."""
    bit_generator = _bit_generator(seed, stream)
    half_width = std * math.sqrt(3.0)
    scale = np.float32(half_width / 2.0**23)
    for start in range(0, count, _CHUNK_ELEMENTS):
        n = min(_CHUNK_ELEMENTS, count - start)
        raw = bit_generator.random_raw((n + 1) // 2)
        # Explicit little-endian view: the same 32-bit words on every machine.
        words = raw.astype("<u8", copy=False).view("<u4")[:n]
        # The top 24 bits as a float32 integer, centred on zero: exact in float32 (half-integers
        # below 2^23), then one correctly rounded multiply. Identical on every IEEE machine.
        values = (words >> np.uint32(8)).astype(np.float32)
        values -= np.float32(8388607.5)
        values *= scale
        yield bf16_safetensors.float32_to_bf16_bits(values)


def _norm_bf16_chunks(seed: int, stream: str, count: int, spread: float) -> Iterator[np.ndarray]:
    """Yields `count` bf16 norm weights: 1.0 each for spread 0, else uniform on [1 - spread, 1 + spread]."""
    if not spread:
        yield np.full(count, 0x3F80, dtype=np.uint16)  # bf16 1.0
        return
    for bits in _uniform_bf16_chunks(seed, stream, count, spread / math.sqrt(3.0)):
        yield bf16_safetensors.float32_to_bf16_bits(np.float32(1.0) + bf16_safetensors.bf16_bits_to_float32(bits))


def successor_table(seed: int, vocab_size: int) -> np.ndarray:
    """successor[t] is the greedy next token after token t, for every id t.

    Non-special ids form one cycle, so a greedy continuation does not repeat for vocab_size-4 tokens;
    no token leads to a special id, so generation never stops early at EOS. Special ids (an unknown
    word's <unk> may end a prompt) lead to the first four tokens of the cycle.
    """
    normal = np.arange(PAD_ID + 1, vocab_size, dtype=np.int64)
    keys = _bit_generator(seed, "lm_head.successor").random_raw(normal.size)
    order = normal[np.argsort(keys, kind="stable")]
    successor = np.empty(vocab_size, dtype=np.int64)
    successor[order] = np.roll(order, -1)
    successor[: PAD_ID + 1] = order[: PAD_ID + 1]
    return successor


def _lm_head_chunks(
    seed: int, shape: ModelShape, embedding_bits: np.ndarray, logit_std: float, successor_gain: float
) -> Iterator[np.ndarray]:
    """Row successor[t] of lm_head is alpha * (sum of embedding[t] over the t leading to it).

    Why: with random weights everywhere, logits are a sum of many random terms, the top two are
    typically only ~0.2 logit-std apart and often much closer, and no scale of lm_head changes that
    ratio, so greedy argmax flips under one-ulp bf16 noise. Here the final hidden state still
    carries the current token's embedding through the residual stream (every block sees its input
    through an RMSNorm, so each adds O(1) per element, and the embedding, std 1, stays about half of
    the final residual at the default size). The successor's logit is then ~cos(h, e_t)*sqrt(hidden)
    logit-stds: ~19 std at the default size, against ~4.5 std for the best of 32000 others. At
    logit_std=2 a numpy reference forward gives top-1 logits ~37 and a top-1 margin >= 16 logits, so
    no bf16 noise can flip it. The other logits (and so top-k logprobs) still depend on the whole
    context through attention and the MLPs.
    alpha = logit_std / (EMBEDDING_STD * sqrt(hidden)) gives the other logits std logit_std, since the
    final RMSNorm leaves the hidden state at unit RMS (norm weights are 1, or near it). Rows of special ids stay
    zero: no token leads to them.
    """
    successor = successor_table(seed, shape.vocab_size)
    special = np.arange(PAD_ID + 1)
    predecessor = np.full(shape.vocab_size, -1, dtype=np.int64)
    normal = np.arange(PAD_ID + 1, shape.vocab_size)
    predecessor[successor[normal]] = normal
    special_predecessor = np.full(shape.vocab_size, -1, dtype=np.int64)
    special_predecessor[successor[special]] = special
    alpha = np.float32(logit_std / (EMBEDDING_STD * math.sqrt(shape.hidden_size)))
    embedding = bf16_safetensors.bf16_bits_to_float32(embedding_bits).reshape(shape.vocab_size, shape.hidden_size)
    # Mixing in independent noise (variance kept at 1) lowers the successor's logit to ~gain times
    # its full value without changing the other logits' spread. A numpy reference forward of the
    # default shape over 64 positions (seed 0): gain 0.5 keeps every greedy choice with a top-1
    # margin >= 2.3 logits (bf16 noise is ~0.06) and the chosen token's logprob spans -2.7..-1e-5,
    # so logprob oracles see context- and weight-dependent values; gain 0.4 already lost a choice.
    noise_weight = np.float32(math.sqrt(max(0.0, 1.0 - successor_gain**2)))
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // shape.hidden_size)
    for start in range(0, shape.vocab_size, rows_per_chunk):
        rows = np.zeros((min(rows_per_chunk, shape.vocab_size - start), shape.hidden_size), dtype=np.float32)
        for sources in (predecessor, special_predecessor):
            block = sources[start : start + rows.shape[0]]
            rows[block >= 0] += embedding[block[block >= 0]]
        rows *= np.float32(successor_gain)
        noise = np.concatenate(list(_uniform_bf16_chunks(seed, f"lm_head.noise.{start}", rows.size, EMBEDDING_STD)))
        rows += noise_weight * bf16_safetensors.bf16_bits_to_float32(noise).reshape(rows.shape)
        rows *= alpha
        yield bf16_safetensors.float32_to_bf16_bits(rows).reshape(-1)


def tensor_names_and_shapes(shape: ModelShape) -> list[tuple]:
    """(name, shape) of every tensor, in file order, named as vLLM's Qwen3 loader expects."""
    h, i = shape.hidden_size, shape.intermediate_size
    q, kv = shape.num_attention_heads * shape.head_dim, shape.num_key_value_heads * shape.head_dim
    out: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (shape.vocab_size, h))]
    for layer in range(shape.num_hidden_layers):
        p = f"model.layers.{layer}."
        out += [
            (p + "input_layernorm.weight", (h,)),
            (p + "self_attn.q_proj.weight", (q, h)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, q)),
            (p + "self_attn.q_norm.weight", (shape.head_dim,)),
            (p + "self_attn.k_norm.weight", (shape.head_dim,)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "mlp.gate_proj.weight", (i, h)),
            (p + "mlp.up_proj.weight", (i, h)),
            (p + "mlp.down_proj.weight", (h, i)),
        ]
    out += [("model.norm.weight", (h,)), ("lm_head.weight", (shape.vocab_size, h))]
    return out


def _tensors(
    seed: int, shape: ModelShape, logit_std: float, successor_gain: float, norm_spread: float
) -> list[bf16_safetensors.Tensor]:
    # The embedding is needed twice (its own tensor and lm_head), so it is the one tensor held in
    # memory (as bf16 bits); everything else is generated while it is written.
    embedding_bits = np.concatenate(
        list(
            _uniform_bf16_chunks(seed, "model.embed_tokens.weight", shape.vocab_size * shape.hidden_size, EMBEDDING_STD)
        )
    )
    tensors = []
    for name, dims in tensor_names_and_shapes(shape):
        count = math.prod(dims)
        if name == "model.embed_tokens.weight":
            chunks = iter([embedding_bits])
        elif name == "lm_head.weight":
            chunks = _lm_head_chunks(seed, shape, embedding_bits, logit_std, successor_gain)
        elif name.endswith("norm.weight"):
            # Near 1, so the RMSNorms still fix activation scale (and the successor margin holds).
            chunks = _norm_bf16_chunks(seed, name, count, norm_spread)
        else:
            # std 1/sqrt(fan_in) keeps every projection's output at ~unit scale, far from bf16 limits.
            chunks = _uniform_bf16_chunks(seed, name, count, 1.0 / math.sqrt(dims[1]))
        tensors.append(bf16_safetensors.Tensor(name, dims, chunks))
    return tensors


def _write_json(path: str, obj: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def write_checkpoint(
    out_dir: str,
    shape: ModelShape = ModelShape(),
    seed: int = 0,
    logit_std: float = 2.0,
    successor_gain: float = 0.5,
    norm_spread: float = 0.0,
) -> int:
    """Writes the six checkpoint files into out_dir; returns the bytes of bf16 weights written."""
    shape.validate()
    os.makedirs(out_dir, exist_ok=True)
    _write_json(os.path.join(out_dir, "config.json"), config_json(shape))
    _write_json(os.path.join(out_dir, "generation_config.json"), generation_config_json())
    word_tokenizer.write_tokenizer_files(out_dir, shape.vocab_size, shape.max_position_embeddings)
    return bf16_safetensors.write_bf16_safetensors(
        os.path.join(out_dir, "model.safetensors"),
        _tensors(seed, shape, logit_std, successor_gain, norm_spread),
        metadata={"format": "pt"},
    )


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    shape = ModelShape(
        hidden_size=FLAGS.hidden_size,
        intermediate_size=FLAGS.intermediate_size,
        num_hidden_layers=FLAGS.num_hidden_layers,
        num_attention_heads=FLAGS.num_attention_heads,
        num_key_value_heads=FLAGS.num_key_value_heads,
        head_dim=FLAGS.head_dim,
        vocab_size=FLAGS.vocab_size,
        max_position_embeddings=FLAGS.max_position_embeddings,
    )
    weight_bytes = write_checkpoint(
        FLAGS.out_dir, shape, FLAGS.seed, FLAGS.logit_std, FLAGS.successor_gain, FLAGS.norm_spread
    )
    print(
        f"wrote {FLAGS.out_dir}: {weight_bytes // 2} parameters, {weight_bytes} bytes of bf16 "
        f"weights ({weight_bytes / 2**20:.1f} MiB)"
    )


if __name__ == "__main__":
    flags.mark_flag_as_required("out_dir")
    app.run(main)
