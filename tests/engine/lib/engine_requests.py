"""Requests as the front end sends them: EngineCoreRequest, preprocessed by the engine core itself."""

from __future__ import annotations

import itertools
import time

from tests.engine.lib import cpu_vllm  # noqa: F401  (before vLLM: pins the platform)
from vllm.sampling_params import SamplingParams
from vllm.v1.engine import EngineCoreRequest, EngineCoreRequestType
from vllm.v1.engine.core import EngineCore, EngineCoreProc
from vllm.v1.request import Request

PROMPT_LEN = 4  # well under a 16-token block: no prefix-cache hits between the tests' requests
_first_tokens = itertools.count(100, PROMPT_LEN)  # distinct prompts, ids inside the tiny vocab


def engine_core_request(request_id: str, max_tokens: int) -> EngineCoreRequest:
    first = next(_first_tokens) % 1900 + 100
    return EngineCoreRequest(
        request_id=request_id,
        prompt_token_ids=list(range(first, first + PROMPT_LEN)),
        mm_features=None,
        sampling_params=SamplingParams(max_tokens=max_tokens),
        pooling_params=None,
        arrival_time=time.time(),
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
    )


def add(engine: EngineCore, request_id: str, max_tokens: int = 3) -> Request:
    """EngineCore.add_request after preprocess_add_request: what the in-process LLMEngine does."""
    request, wave = engine.preprocess_add_request(engine_core_request(request_id, max_tokens))
    engine.add_request(request, wave)
    return request


def send(proc: EngineCoreProc, request_id: str, max_tokens: int = 3) -> None:
    """What EngineCoreProc's input socket thread does with an ADD: preprocess, then queue it."""
    preprocessed = proc.preprocess_add_request(engine_core_request(request_id, max_tokens))
    proc.input_queue.put_nowait((EngineCoreRequestType.ADD, preprocessed))
