"""The fixed prompts every output oracle compares on.

Plain English words: the synthetic checkpoint's tokenizer is a WordLevel vocabulary of English words
plus filler, so these tokenize to real ids (an unknown word maps to <unk>, which is still deterministic).
"""

PROMPTS = [
    "the quick brown fox jumps over the lazy dog",
    "once upon a time there was a small house near the river",
    "we walked to the market and bought bread water and apples",
    "the number of people in the city grew every year after the war",
]

# Fixed length for token-id comparisons (always sent with ignore_eos, so every completion is exactly
# this long and a shorter one means the request was cut off).
GOLDEN_MAX_TOKENS = 16
