"""Tests of the synthetic Qwen3 checkpoint generator, on the tiny shape (a few MB, ~1 s)."""

import filecmp
import json
import math
import os
import struct

import numpy as np
import pytest
import safetensors
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from tools.checkpoints import bf16_safetensors, reference_forward
from tools.checkpoints import make_synthetic_model as msm

FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)
PROMPT = "The quick brown fox jumps over the lazy dog"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out_dir = str(tmp_path_factory.mktemp("tiny_seed0"))
    weight_bytes = msm.write_checkpoint(out_dir, msm.TINY, seed=0, successor_gain=1.0)
    return out_dir, weight_bytes


def _tensor_path(out_dir):
    return os.path.join(out_dir, "model.safetensors")


def test_writes_exactly_the_checkpoint_files(tiny):
    out_dir, _ = tiny
    assert sorted(os.listdir(out_dir)) == sorted(FILES)


def test_header_lists_every_tensor_vllm_loads_with_its_shape(tiny):
    out_dir, weight_bytes = tiny
    header, data_start = bf16_safetensors.read_header(_tensor_path(out_dir))
    assert header.pop("__metadata__") == {"format": "pt"}
    expected = dict(msm.tensor_names_and_shapes(msm.TINY))
    assert {name: tuple(entry["shape"]) for name, entry in header.items()} == expected
    assert all(entry["dtype"] == "BF16" for entry in header.values())
    # Data offsets tile the data section without gaps, as safetensors requires.
    spans = sorted(entry["data_offsets"] for entry in header.values())
    assert spans[0][0] == 0
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        assert end - begin == 2 * math.prod(entry["shape"]), name
    assert spans[-1][1] == weight_bytes
    assert os.path.getsize(_tensor_path(out_dir)) == data_start + weight_bytes
    assert (data_start - 8) % 8 == 0
    names = {
        f"model.layers.{i}.{suffix}"
        for i in range(msm.TINY.num_hidden_layers)
        for suffix in (
            "self_attn.q_proj.weight",
            "self_attn.k_norm.weight",
            "mlp.down_proj.weight",
            "post_attention_layernorm.weight",
        )
    }
    assert names | {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} <= set(header)


def test_safetensors_library_parses_the_file_to_the_same_bytes(tiny):
    out_dir, _ = tiny
    path = _tensor_path(out_dir)
    with open(path, "rb") as f:
        parsed = dict(safetensors.deserialize(f.read()))
    header, data_start = bf16_safetensors.read_header(path)
    assert set(parsed) == set(header) - {"__metadata__"}
    with open(path, "rb") as f:
        raw = f.read()
    for name, tensor in parsed.items():
        assert tensor["dtype"] == "BF16" and list(tensor["shape"]) == header[name]["shape"]
        begin, end = header[name]["data_offsets"]
        assert bytes(tensor["data"]) == raw[data_start + begin : data_start + end], name
    with safetensors.safe_open(path, framework="numpy") as f:
        assert f.metadata() == {"format": "pt"}
        assert sorted(f.keys()) == sorted(parsed)


def test_weights_are_finite_with_the_documented_scales(tiny):
    out_dir, _ = tiny
    path = _tensor_path(out_dir)
    h = msm.TINY.hidden_size
    embedding = bf16_safetensors.read_bf16_tensor(path, "model.embed_tokens.weight")
    assert abs(embedding.std() - msm.EMBEDDING_STD) < 0.02
    q = bf16_safetensors.read_bf16_tensor(path, "model.layers.0.self_attn.q_proj.weight")
    assert abs(q.std() * math.sqrt(h) - 1.0) < 0.02
    down = bf16_safetensors.read_bf16_tensor(path, "model.layers.1.mlp.down_proj.weight")
    assert abs(down.std() * math.sqrt(msm.TINY.intermediate_size) - 1.0) < 0.02
    assert np.all(bf16_safetensors.read_bf16_tensor(path, "model.norm.weight") == 1.0)
    assert np.all(bf16_safetensors.read_bf16_tensor(path, "model.layers.0.self_attn.q_norm.weight") == 1.0)
    for name, _ in msm.tensor_names_and_shapes(msm.TINY):
        assert np.isfinite(bf16_safetensors.read_bf16_tensor(path, name)).all(), name


def test_same_seed_is_byte_identical_and_another_seed_differs(tiny, tmp_path):
    out_dir, _ = tiny
    again, other = str(tmp_path / "again"), str(tmp_path / "other")
    msm.write_checkpoint(again, msm.TINY, seed=0, successor_gain=1.0)
    msm.write_checkpoint(other, msm.TINY, seed=1, successor_gain=1.0)
    for name in FILES:
        assert filecmp.cmp(os.path.join(out_dir, name), os.path.join(again, name), shallow=False), name
    assert not filecmp.cmp(_tensor_path(out_dir), _tensor_path(other), shallow=False)
    for name in set(FILES) - {"model.safetensors"}:
        assert filecmp.cmp(os.path.join(out_dir, name), os.path.join(other, name), shallow=False)


def test_config_is_a_consistent_qwen3_config(tiny):
    out_dir, _ = tiny
    with open(os.path.join(out_dir, "config.json")) as f:
        config = json.load(f)
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["model_type"] == "qwen3"
    assert config["torch_dtype"] == config["dtype"] == "bfloat16"
    assert config["num_attention_heads"] % config["num_key_value_heads"] == 0
    header, _ = bf16_safetensors.read_header(_tensor_path(out_dir))
    attention = "model.layers.0.self_attn."
    assert header[attention + "q_proj.weight"]["shape"] == [
        config["num_attention_heads"] * config["head_dim"],
        config["hidden_size"],
    ]
    assert header[attention + "k_proj.weight"]["shape"] == [
        config["num_key_value_heads"] * config["head_dim"],
        config["hidden_size"],
    ]
    assert config["vocab_size"] == msm.TINY.vocab_size
    assert config["hidden_act"] == "silu"
    assert not config["tie_word_embeddings"] and not config["attention_bias"]
    assert not config["use_sliding_window"] and config["sliding_window"] is None
    assert config["rope_parameters"]["rope_theta"] == config["rope_theta"]
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (1, 2, 3)
    with open(os.path.join(out_dir, "generation_config.json")) as f:
        assert json.load(f)["eos_token_id"] == config["eos_token_id"]


def test_json_files_are_sorted_and_timestamp_free(tiny):
    out_dir, _ = tiny
    for name in ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json"):
        with open(os.path.join(out_dir, name)) as f:
            text = f.read()
        assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n", name


def test_tokenizer_covers_the_vocabulary_and_round_trips(tiny):
    out_dir, _ = tiny
    tokenizer = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    assert tokenizer.get_vocab_size(with_added_tokens=True) == msm.TINY.vocab_size
    encoding = tokenizer.encode(PROMPT)
    assert msm.UNK_ID not in encoding.ids
    assert encoding.tokens == PROMPT.split()
    vocab = tokenizer.get_vocab()
    assert encoding.ids == [vocab[word] for word in PROMPT.split()]
    assert tokenizer.decode(encoding.ids) == PROMPT
    assert tokenizer.token_to_id("w2047") == 2047
    assert tokenizer.encode("zebraxylophone").ids == [msm.UNK_ID]
    with open(os.path.join(out_dir, "tokenizer_config.json")) as f:
        config = json.load(f)
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert [tokenizer.token_to_id(config[k]) for k in ("unk_token", "bos_token", "eos_token", "pad_token")] == [
        0,
        1,
        2,
        3,
    ]


def test_every_id_decodes_in_one_batch_and_incrementally(tiny):
    out_dir, _ = tiny
    tokenizer = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    ids = list(range(msm.TINY.vocab_size))
    text = tokenizer.decode(ids, skip_special_tokens=False)
    assert len(text.split(" ")) == msm.TINY.vocab_size
    # vLLM detokenizes generated ids one by one with a DecodeStream.
    stream = DecodeStream(skip_special_tokens=True)
    pieces = [stream.step(tokenizer, i) for i in ids]
    assert pieces[:4] == [None] * 4
    assert "".join(p for p in pieces if p) == tokenizer.decode(ids, skip_special_tokens=True)


def test_greedy_choice_is_the_designed_successor_with_a_wide_margin(tiny):
    out_dir, _ = tiny
    ids = np.random.default_rng(7).integers(0, msm.TINY.vocab_size, 48)
    ids[[3, 17]] = msm.UNK_ID  # A prompt with unknown words.
    logits = reference_forward.logits(reference_forward.reader(_tensor_path(out_dir)), msm.TINY, ids)
    top2 = np.sort(logits, axis=-1)[:, -2:]
    successor = msm.successor_table(0, msm.TINY.vocab_size)
    assert np.array_equal(logits.argmax(-1), successor[ids])
    # The margin is many bf16 ulps of the logit even on the tiny shape (hidden 256).
    assert (top2[:, 1] - top2[:, 0]).min() > 3.0
    assert np.all(logits[:, :4].max(-1) < top2[:, 1])  # No special token is ever chosen.


@pytest.fixture(scope="module")
def spread_b(tmp_path_factory):
    """Checkpoint B's recipe on the tiny shape: seed 1 with seeded norm weights (tools/checkpoints/BUILD.bazel)."""
    out_dir = str(tmp_path_factory.mktemp("tiny_seed1_spread"))
    msm.write_checkpoint(out_dir, msm.TINY, seed=1, successor_gain=1.0, norm_spread=0.25)
    return out_dir


def test_norm_spread_writes_seeded_norm_weights_around_one(spread_b, tmp_path):
    path = _tensor_path(spread_b)
    names = ("model.norm.weight", "model.layers.1.self_attn.q_norm.weight", "model.layers.0.input_layernorm.weight")
    for name in names:
        weight = bf16_safetensors.read_bf16_tensor(path, name)
        assert weight.min() >= 0.75 and weight.max() <= 1.25, name
        assert weight.std() > 0.1, f"{name}: a spread of 0.25 has std ~0.14, got {weight.std()}"
    # Another stream per tensor: two norms of one width hold other values.
    assert not np.array_equal(
        bf16_safetensors.read_bf16_tensor(path, "model.layers.0.self_attn.q_norm.weight"),
        bf16_safetensors.read_bf16_tensor(path, "model.layers.0.self_attn.k_norm.weight"),
    )
    again = str(tmp_path / "again")
    msm.write_checkpoint(again, msm.TINY, seed=1, successor_gain=1.0, norm_spread=0.25)
    assert filecmp.cmp(path, _tensor_path(again), shallow=False)


def test_seeded_norm_weights_keep_the_designed_successor_with_a_wide_margin(spread_b):
    ids = np.random.default_rng(7).integers(0, msm.TINY.vocab_size, 48)
    logits = reference_forward.logits(reference_forward.reader(_tensor_path(spread_b)), msm.TINY, ids)
    top2 = np.sort(logits, axis=-1)[:, -2:]
    assert np.array_equal(logits.argmax(-1), msm.successor_table(1, msm.TINY.vocab_size)[ids])
    assert (top2[:, 1] - top2[:, 0]).min() > 3.0


def test_successor_table_is_one_cycle_over_normal_ids():
    successor = msm.successor_table(0, 100)
    seen, token = set(), 4
    for _ in range(96):
        seen.add(token)
        token = successor[token]
    assert token == 4 and seen == set(range(4, 100))
    assert set(successor[:4]) <= seen and len(set(successor[:4])) == 4


@pytest.mark.parametrize(
    "bits, expected",
    [
        (0x3F800000, 0x3F80),  # 1.0 exactly
        (0x3F808000, 0x3F80),  # tie, even kept
        (0x3F818000, 0x3F82),  # tie, odd rounds up to even
        (0x3F808001, 0x3F81),  # just above the tie
        (0xBF807FFF, 0xBF80),  # negative, just below the tie
        (0x7F7FFFFF, 0x7F80),  # float32 max rounds to bf16 inf, as round-to-nearest does
    ],
)
def test_bf16_rounding_is_nearest_even(bits, expected):
    value = np.array([bits], dtype=np.uint32).view(np.float32)
    assert int(bf16_safetensors.float32_to_bf16_bits(value)[0]) == expected


def test_bf16_rounding_matches_a_scalar_reference():
    values = np.random.default_rng(0).normal(0, 3, 10000).astype(np.float32)
    got = bf16_safetensors.float32_to_bf16_bits(values)
    for value, bits in zip(values[:500], got[:500]):
        (b,) = struct.unpack("<I", struct.pack("<f", float(value)))
        upper, lower = b >> 16, b & 0xFFFF
        upper += 1 if lower > 0x8000 or (lower == 0x8000 and upper & 1) else 0
        assert int(bits) == upper
    widened = bf16_safetensors.bf16_bits_to_float32(got)
    assert np.all(np.abs(widened - values) <= np.abs(values) * 2.0**-8)


def test_write_rejects_chunks_that_do_not_fill_the_shape(tmp_path):
    tensor = bf16_safetensors.Tensor("x", (2, 3), [np.zeros(5, dtype=np.uint16)])
    with pytest.raises(ValueError, match="needs 6"):
        bf16_safetensors.write_bf16_safetensors(str(tmp_path / "x.safetensors"), [tensor])


def test_shape_validation_names_the_problem():
    with pytest.raises(ValueError, match="must divide"):
        msm.ModelShape(num_attention_heads=12, num_key_value_heads=5).validate()
    with pytest.raises(ValueError, match="fixed tokens"):
        msm.ModelShape(vocab_size=100).validate()


def test_transformers_loads_config_and_tokenizer(tiny):
    transformers = pytest.importorskip("transformers")  # Present on the GPU machine only.
    out_dir, _ = tiny
    config = transformers.AutoConfig.from_pretrained(out_dir)
    assert config.model_type == "qwen3" and config.vocab_size == msm.TINY.vocab_size
    tokenizer = transformers.AutoTokenizer.from_pretrained(out_dir)
    assert len(tokenizer) == msm.TINY.vocab_size
    ids = tokenizer(PROMPT)["input_ids"]
    assert msm.UNK_ID not in ids and tokenizer.decode(ids) == PROMPT
    assert tokenizer.decode(list(range(4, msm.TINY.vocab_size))).count(" ") == msm.TINY.vocab_size - 5
