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

# Prompts of 64-67 tokens (one word or mark is one token, every one in the vocabulary: checked by
# unit/prompts_unit_test.py): more than three full 16-token KV blocks each, so a repeat of one is
# served partly from the prefix cache. PROMPTS are all shorter than one block and never are.
LONG_PROMPTS = [
    "once in a time there was a small village by the river and every morning the children walked to "
    "school through the forest and their mother and father went to work in the garden . the teacher "
    "told them a story about a king and a queen who were in a big house on the hill with a dog a cat "
    "and many birds",
    "the engine of the old train was slow and the road to the city was long so the people on the train "
    "read books and games and said many things about the rain . after one hour the train came to a small "
    "town where a man had bread milk and apples for every person who was there and the children took "
    "some before night",
    "we need to explain how the server is used : first the model has the prompt and it is a list of "
    "tokens , then it will write the output one token at a time . when the server goes to sleep the "
    "memory is free and when it is awake again the weight will come back so the next request has the "
    "same answer as before",
]

# What a checkpoint's golden file holds (goldens.py, tests/sleep_wake/goldens): the weight-sync class
# compares a pushed checkpoint on both kinds, since a prefix-cached block computed with the old weights
# must never serve the new ones.
CHECKPOINT_GOLDEN_PROMPTS = PROMPTS + LONG_PROMPTS

# Fixed length for token-id comparisons (always sent with ignore_eos, so every completion is exactly
# this long and a shorter one means the request was cut off).
GOLDEN_MAX_TOKENS = 16

# The state walk's two requests beyond the greedy goldens, in one place because a checkpoint's golden
# file (goldens.py) holds their answers and the walk (walk/gpu_walk.py) sends them again: a change to
# one side alone would compare two different requests.
# The seeded sample: n choices at temperature 1.0 from one seed, so sampling is compared too, not
# only the argmax.
SEED_N, SEED = 4, 1234
SEEDED_PROMPT = PROMPTS[2]
SEEDED_TEMPERATURE = 1.0
# The request in flight: shorter than one KV block, so it caches nothing, and STREAM_TOKENS long, so it
# is mid-decode when a /sleep lands; its golden is the uninterrupted run a paused request resumes into.
IN_FLIGHT = PROMPTS[3]
STREAM_TOKENS = 128
