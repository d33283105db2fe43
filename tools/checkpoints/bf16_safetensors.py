"""Streams bf16 tensors into a .safetensors file and reads its header back.

Written by hand (rather than with `safetensors.numpy`) because numpy has no bfloat16 dtype and
because the checkpoint is larger than we want to hold in memory twice: tensors arrive as chunks of
bf16 bit patterns (uint16) and go straight to disk.
"""

import hashlib
import json
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

BF16_BYTES = 2
_ALIGNMENT = 8  # safetensors pads the JSON header with spaces to a multiple of 8 bytes.


class Tensor(NamedTuple):
    """One tensor to write: its name, shape and a lazy iterable of uint16 bf16 chunks (C order)."""

    name: str
    shape: tuple[int, ...]
    chunks: Iterable[np.ndarray]


def float32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Rounds float32 values to bf16 (round to nearest, ties to even); returns the uint16 bit patterns.

    Done with integer ops on the float32 bit pattern so the result is exact and identical on every
    machine. The inputs must be finite (no NaN handling: the generator never makes NaN).
    """
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).copy()
    lsb = bits >> np.uint32(16)
    lsb &= np.uint32(1)
    bits += np.uint32(0x7FFF)
    bits += lsb
    bits >>= np.uint32(16)
    return bits.astype(np.uint16)


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Widens bf16 bit patterns (uint16) to float32 exactly."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _header_bytes(tensors: Sequence[Tensor], metadata: Mapping[str, str] | None) -> bytes:
    entries = {}
    offset = 0
    for tensor in tensors:
        size = math.prod(tensor.shape) * BF16_BYTES
        entries[tensor.name] = {
            "dtype": "BF16",
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    if metadata:
        entries["__metadata__"] = dict(metadata)
    header = json.dumps(entries, sort_keys=True, separators=(",", ":")).encode("utf-8")
    header += b" " * (-len(header) % _ALIGNMENT)
    return header


def write_bf16_safetensors(path: str, tensors: Sequence[Tensor], metadata: Mapping[str, str] | None = None) -> int:
    """Writes `tensors` to `path` in order, consuming each tensor's chunks lazily.

    Returns the number of tensor data bytes written. Raises ValueError if a tensor's chunks do not add
    up to its shape, so a generator bug cannot produce a file whose offsets lie.
    """
    names = [tensor.name for tensor in tensors]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate tensor names in {names}")
    header = _header_bytes(tensors, metadata)
    written = 0
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(header)))
        out.write(header)
        for tensor in tensors:
            expected = math.prod(tensor.shape)
            got = 0
            for chunk in tensor.chunks:
                chunk = np.ascontiguousarray(chunk, dtype="<u2")
                out.write(chunk.tobytes())
                got += chunk.size
            if got != expected:
                raise ValueError(
                    f"tensor {tensor.name}: chunks held {got} elements, shape "
                    f"{tensor.shape} needs {expected}; fix its chunk generator"
                )
            written += got * BF16_BYTES
    return written


def read_header(path: str) -> tuple[dict, int]:
    """Returns (header dict, byte offset where tensor data starts) of a .safetensors file."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length).decode("utf-8"))
    return header, 8 + length


def tensor_digests(path: str) -> dict[str, str]:
    """Tensor name -> sha256 of its bytes in the .safetensors file, read at the header's offsets: what a
    load of the file must put in each tensor, told from the file itself, whatever the dtype."""
    header, data_start = read_header(path)
    header.pop("__metadata__", None)
    digests = {}
    with open(path, "rb") as f:
        for name, entry in header.items():
            begin, end = entry["data_offsets"]
            f.seek(data_start + begin)
            digests[name] = hashlib.sha256(f.read(end - begin)).hexdigest()
    return digests


def read_bf16_tensor(path: str, name: str) -> np.ndarray:
    """Reads one BF16 tensor as float32 (for tests and checks, not for speed)."""
    header, data_start = read_header(path)
    entry = header[name]
    if entry["dtype"] != "BF16":
        raise ValueError(f"tensor {name} is {entry['dtype']}, this reader only handles BF16")
    begin, end = entry["data_offsets"]
    bits = np.fromfile(path, dtype="<u2", count=(end - begin) // BF16_BYTES, offset=data_start + begin)
    return bf16_bits_to_float32(bits).reshape(entry["shape"])
