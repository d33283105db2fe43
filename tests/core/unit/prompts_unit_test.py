"""The prompts against the synthetic checkpoint's tokenizer (tools/checkpoints/word_tokenizer.py): every word is
in the vocabulary, PROMPTS stay within one 16-token KV block and LONG_PROMPTS span more than three."""

import pytest

from tests.core.prompts import LONG_PROMPTS, PROMPTS
from tools.checkpoints import word_tokenizer

BLOCK = 16  # vLLM's default KV block size on CUDA
VOCAB_SIZE = 32000  # //tools/checkpoints:synthetic_qwen3 and _b


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer.build_tokenizer(VOCAB_SIZE)


@pytest.mark.parametrize("prompt", LONG_PROMPTS)
def test_long_prompts_are_known_words_spanning_more_than_three_blocks(tokenizer, prompt):
    vocabulary = word_tokenizer.vocabulary(VOCAB_SIZE)
    assert not [w for w in prompt.split() if w not in vocabulary], "words outside the vocabulary (<unk>)"
    ids = tokenizer.encode(prompt).ids
    assert len(ids) > 3 * BLOCK, f"{len(ids)} tokens: a repeat would hit too few cached blocks"


@pytest.mark.parametrize("prompt", PROMPTS)
def test_short_prompts_fit_one_block(tokenizer, prompt):
    assert len(tokenizer.encode(prompt).ids) < BLOCK


def test_prompts_are_distinct():
    assert len(set(PROMPTS + LONG_PROMPTS)) == len(PROMPTS) + len(LONG_PROMPTS)
