"""A float32 numpy forward pass of Qwen3 (vLLM's math) over a synthetic checkpoint: the reference that
make_synthetic_model_test holds the generator's greedy design against, and that tests/mutants/norm_drift.py
sizes the weights_perturbed mutant with (for tests and checks, not for speed)."""

import functools
import math
from collections.abc import Callable

import numpy as np

from tools.checkpoints import bf16_safetensors


def reader(path: str) -> Callable[[str], np.ndarray]:
    """The checkpoint's tensors by name, as float32, each read once."""
    return functools.cache(lambda name: bf16_safetensors.read_bf16_tensor(path, name))


def rms_norm(x: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm before its weight (the caller multiplies by it)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def logprobs(logits: np.ndarray) -> np.ndarray:
    """Log-softmax over the last axis (what vLLM returns as a token's logprob)."""
    top = logits.max(-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))


def rope(x: np.ndarray, theta: float) -> np.ndarray:
    half = x.shape[-1] // 2
    angles = np.arange(x.shape[0])[:, None] * theta ** (-np.arange(half) / half)[None, :]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def logits(weight: Callable[[str], np.ndarray], shape, ids) -> np.ndarray:
    """Logits per position of the token ids; shape: the checkpoint's ModelShape."""
    return (final_hidden(weight, shape, ids) * weight("model.norm.weight")) @ weight("lm_head.weight").T


def final_hidden(weight: Callable[[str], np.ndarray], shape, ids) -> np.ndarray:
    """The final RMSNorm's output per position, before its weight: times a norm weight, then lm_head, it
    gives the logits a changed final norm would (tests/mutants/norm_drift.py)."""
    n, hd, eps = len(ids), shape.head_dim, shape.rms_norm_eps
    group = shape.num_attention_heads // shape.num_key_value_heads
    causal = np.triu(np.full((n, n), -np.inf), 1)
    x = weight("model.embed_tokens.weight")[ids]
    for layer in range(shape.num_hidden_layers):
        p = f"model.layers.{layer}."
        h = rms_norm(x, eps) * weight(p + "input_layernorm.weight")
        q = (h @ weight(p + "self_attn.q_proj.weight").T).reshape(n, -1, hd)
        k = (h @ weight(p + "self_attn.k_proj.weight").T).reshape(n, -1, hd)
        v = (h @ weight(p + "self_attn.v_proj.weight").T).reshape(n, -1, hd)
        q = rope(rms_norm(q, eps) * weight(p + "self_attn.q_norm.weight"), shape.rope_theta)
        k = rope(rms_norm(k, eps) * weight(p + "self_attn.k_norm.weight"), shape.rope_theta)
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) / math.sqrt(hd) + causal
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        x = x + np.einsum("hts,shd->thd", probs, v).reshape(n, -1) @ weight(p + "self_attn.o_proj.weight").T
        h = rms_norm(x, eps) * weight(p + "post_attention_layernorm.weight")
        gate, up = h @ weight(p + "mlp.gate_proj.weight").T, h @ weight(p + "mlp.up_proj.weight").T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ weight(p + "mlp.down_proj.weight").T
    return rms_norm(x, eps)
