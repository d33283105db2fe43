"""The checkpoint a fake server serves, and what the fake generates from the weights it holds.

A checkpoint is known by a digest of its *.safetensors files, so two checkpoints (the weight-sync
class's A and B) give different tokens and logprobs, the same files give the same output wherever they
lie, and a push that never arrived shows in the output. The tensor sizes come from the headers, as the
memory classes read them (tests/core/memory.py): the fake's weights pool and its host copy are made of them.

What a pool holds is a `weights` string: a checkpoint's digest, a mix a defect made of two, or None for
garbage (memory mapped back without its values).
"""

import dataclasses
import functools
import glob
import hashlib
import os

from tests.core import memory
from tools.checkpoints import bf16_safetensors

_CHUNK = 1 << 20


class CheckpointError(RuntimeError):
    """A path that is not a checkpoint the fake can load (vLLM's loader fails on it as well)."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    path: str  # the directory ("" for the unit tests' checkpoint-less fake)
    digest: str  # what the pool holds once this checkpoint is loaded
    tensor_bytes: tuple  # bytes per tensor, one CuMem allocation each in the weights pool
    # What the checkpoint's 1-D tensors (its norm weights) are, apart from the rest: a load that leaves them
    # behind (push_skips_norms) is seen only where two checkpoints' norm weights differ.
    norms: str = ""

    @property
    def total_bytes(self) -> int:
        return sum(self.tensor_bytes)


# FakeVllm on its own (the client's unit tests): no files, one 500 MiB tensor (the H200 checkpoint's size).
NONE = Checkpoint("", "no checkpoint", (500 << 20,))


@functools.lru_cache(maxsize=16)
def _digest(paths: tuple, stamps: tuple) -> str:
    """sha256 over the files; `stamps` (size, mtime) only key the cache, so a rewritten file is read again."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=16)
def _norms_digest(paths: tuple, stamps: tuple) -> str:
    """sha256 over the bytes of the files' 1-D tensors, read at their header offsets."""
    h = hashlib.sha256()
    for path in paths:
        header, data_start = bf16_safetensors.read_header(path)
        with open(path, "rb") as f:
            for name in sorted(k for k, v in header.items() if k != "__metadata__" and len(v["shape"]) == 1):
                begin, end = header[name]["data_offsets"]
                f.seek(data_start + begin)
                h.update(name.encode() + f.read(end - begin))
    return h.hexdigest()[:16]


def with_norms_of(weights: str | None, norms: str | None) -> str | None:
    """The pool's weights once `weights` were loaded over a pool whose 1-D tensors (`norms`) stayed: garbage
    where those were (None)."""
    if weights is None or norms is None:
        return None
    return f"{weights} with the 1-D tensors {norms}"


def load(path: str) -> Checkpoint:
    """The checkpoint in directory `path`; CheckpointError when there is none."""
    if not os.path.isabs(path):
        raise CheckpointError(
            f"{path!r} is not an absolute checkpoint directory (vLLM's workers resolve a "
            "relative weights_path in their own working directory); pass an absolute path"
        )
    files = tuple(sorted(glob.glob(os.path.join(path, "*.safetensors"))))
    if not files:
        raise CheckpointError(f"no *.safetensors in {path!r}: not a checkpoint directory")
    stamps = tuple((os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files)
    return Checkpoint(
        path, _digest(files, stamps), tuple(memory.checkpoint_tensors(path).values()), _norms_digest(files, stamps)
    )


def _hash(*parts) -> bytes:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()


def tokens(weights: str | None, prompt: str, n: int, choice: int, seed) -> list[int]:
    """The token ids `weights` generate for the prompt; garbage weights generate token 0 throughout
    (zeroed logits: what the mutants' zeroed output projection gives)."""
    if weights is None:
        return [0] * n
    digest = _hash(weights, prompt, choice, seed)
    return [(digest[i % len(digest)] * 7 + i) % 1000 + 10 for i in range(n)]


def logprob(weights: str | None, token: int) -> float:
    """The sampled token's logprob under `weights`: between -0.5 and -0.1 nats."""
    return -(0.1 + _hash(weights, token)[0] / 640)


_HEAD = " with the output projection of "


def mixed(weights: str | None, head: str | None) -> str | None:
    """The pool's weights with the output projection of `head` (a restore from a stale copy)."""
    if weights is None or head is None:
        return None
    body = weights.split(_HEAD)[0]
    return body if body == head else f"{body}{_HEAD}{head}"
