"""What the fake serves follows its checkpoint: fake_checkpoint.py and FakeEngine's reload_weights."""

import json
import struct

import pytest

from tests.sleep_wake.fakes import fake_checkpoint
from tests.sleep_wake.fakes.fake_engine import FakeEngine, GpuMemory

SIZES = {"lm_head.weight": 3000, "model.norm.weight": 64}


def _checkpoint(path, seed: int, sizes=None) -> str:
    """A directory with one safetensors file of `sizes` (name -> bytes) whose values depend on seed."""
    sizes = sizes or SIZES
    path.mkdir()
    header, offset = {}, 0
    for name, n in sizes.items():
        header[name] = {"dtype": "U8", "shape": [n], "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    with open(path / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + bytes([seed % 256]) * offset)
    return str(path)


def test_load_reads_sizes_and_tells_checkpoints_apart(tmp_path):
    a = fake_checkpoint.load(_checkpoint(tmp_path / "a", 0))
    b = fake_checkpoint.load(_checkpoint(tmp_path / "b", 1))
    again = fake_checkpoint.load(_checkpoint(tmp_path / "a_copy", 0))
    assert a.tensor_bytes == (3000, 64) and a.total_bytes == 3064
    assert a.digest != b.digest and a.digest == again.digest  # the values, not the path
    prompt = "the quick brown fox"
    assert fake_checkpoint.tokens(a.digest, prompt, 8, 0, None) != fake_checkpoint.tokens(b.digest, prompt, 8, 0, None)
    assert fake_checkpoint.logprob(a.digest, 11) != fake_checkpoint.logprob(b.digest, 11)
    assert fake_checkpoint.tokens(None, prompt, 3, 0, None) == [0, 0, 0]


@pytest.mark.parametrize("path,match", [("relative/dir", "not an absolute"), ("/nonexistent", "no \\*.safetensors")])
def test_load_refuses_what_is_not_a_checkpoint(path, match):
    with pytest.raises(fake_checkpoint.CheckpointError, match=match):
        fake_checkpoint.load(path)


def test_mixed_weights_keep_the_body_and_take_the_head():
    assert fake_checkpoint.mixed("B", "A") not in ("A", "B")
    assert fake_checkpoint.mixed(fake_checkpoint.mixed("B", "A"), "B") == "B"
    assert fake_checkpoint.mixed(None, "A") is None and fake_checkpoint.mixed("B", None) is None


def _engine(path, defects=()):
    checkpoint = fake_checkpoint.load(path)
    return FakeEngine(
        GpuMemory(weights=checkpoint.total_bytes, kv_cache=1 << 20), defects=defects, checkpoint=checkpoint
    )


def test_a_push_is_served_and_kept_as_the_model_path(tmp_path):
    a_dir, b_dir = _checkpoint(tmp_path / "a", 0), _checkpoint(tmp_path / "b", 1)
    e = _engine(a_dir)
    a, b = e.weights, fake_checkpoint.load(b_dir).digest
    e.sleep(1, "abort")
    e.wake_up(["weights"])
    e.reload_weights(b_dir)
    e.wake_up(["kv_cache"])
    assert e.weights == b
    e.sleep(1, "abort")
    e.wake_up(None)
    assert e.weights == b  # the level-1 copy is of B
    e.sleep(2, "abort")
    e.wake_up(["weights"])
    assert e.weights is None
    e.reload_weights()  # known divergence reload_without_path_loads_last_pushed
    assert e.weights == b
    e.reload_weights(a_dir)
    assert e.weights == a


def test_a_push_of_other_shapes_fails(tmp_path):
    e = _engine(_checkpoint(tmp_path / "a", 0))
    with pytest.raises(RuntimeError, match="other tensor shapes"):
        e.reload_weights(_checkpoint(tmp_path / "big", 1, {"lm_head.weight": 4000}))


def test_push_defects(tmp_path):
    a_dir, b_dir = _checkpoint(tmp_path / "a", 0), _checkpoint(tmp_path / "b", 1)
    b = fake_checkpoint.load(b_dir).digest
    ignored = _engine(a_dir, ["reload_ignores_weights_path"])
    a = ignored.weights
    ignored.reload_weights(b_dir)
    assert ignored.weights == a
    stale = _engine(a_dir, ["host_copy_predates_update"])
    stale.reload_weights(b_dir)
    assert stale.weights == b
    stale.sleep(1, "abort")
    stale.wake_up(None)
    assert stale.weights == fake_checkpoint.mixed(b, a)


def _checkpoint_of(path, tensors: dict) -> str:
    """A directory with one safetensors file: name -> (shape, the byte every element holds)."""
    path.mkdir()
    header, offset, data = {}, 0, b""
    for name, (shape, value) in tensors.items():
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": "U8", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset, data = offset + n, data + bytes([value]) * n
    raw = json.dumps(header).encode()
    with open(path / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)
    return str(path)


def test_a_push_that_skips_the_norms_shows_only_where_the_norms_differ(tmp_path):
    def checkpoint(name, head, norm):
        tensors = {"lm_head.weight": ((30, 100), head), "model.norm.weight": ((64,), norm)}
        return _checkpoint_of(tmp_path / name, tensors)

    a, same_norms, b = checkpoint("a", 0, 0), checkpoint("b_same_norms", 1, 0), checkpoint("b", 1, 1)
    blind = _engine(a, ["push_skips_norms"])
    blind.load_weights(same_norms)
    assert blind.weights == fake_checkpoint.load(same_norms).digest  # the bytes left behind are the same
    seen = _engine(a, ["push_skips_norms"])
    seen.load_weights(b)
    assert seen.weights not in (None, fake_checkpoint.load(b).digest, fake_checkpoint.load(a).digest)
    seen.sleep(1, "abort")
    seen.wake_up(None)
    assert seen.weights == fake_checkpoint.with_norms_of(fake_checkpoint.load(b).digest, fake_checkpoint.load(a).norms)
    seen.sleep(2, "abort")  # the pool discarded: the norm weights a reload leaves behind are garbage
    seen.wake_up(["weights"])
    seen.reload_weights(a)
    assert seen.weights is None
    healthy = _engine(a)
    healthy.load_weights(b)
    assert healthy.weights == fake_checkpoint.load(b).digest
