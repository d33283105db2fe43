"""Builds the synthetic model's word-level tokenizer with the `tokenizers` library.

The vocabulary is exactly `vocab_size` entries: special tokens, a fixed list of plain English words
(so test prompts tokenize without <unk>), then filler words "w<id>". Every id the model can emit
therefore decodes to text, which vLLM's detokenizer needs.
"""

import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

UNK, BOS, EOS, PAD = "<unk>", "<s>", "</s>", "<pad>"
SPECIAL_TOKENS = (UNK, BOS, EOS, PAD)  # ids 0..3, in this order.

# Words for prompts. Capitalised forms are separate tokens so sentences round-trip exactly.
_WORDS = """
the a an and or but if then so because of to in on at by for with from into over under about
after before between through during without within against among up down out off again once
is are was were be been being am has have had do does did will would can could should may might
must shall not no yes all any some many much more most few less each every other another such
same own only just also very too quite than as like what which who whom whose when where why how
this that these those there here it its he she they we you i me him her them us my your his our
their one two three four five six seven eight nine ten hundred thousand million first second
third last next new old good bad great small large big little long short high low early late
young right left best better real sure free full true false open close hard easy strong weak
fast slow hot cold warm cool dark light bright quick brown fox jumps jump lazy dog dogs cat cats
bird birds fish horse cow sheep mouse animal animals tree trees forest river lake sea ocean
mountain hill road street city town village country world earth sun moon star stars sky cloud
rain snow wind fire water air stone rock sand gold silver iron wood paper book books story
stories word words sentence letter page name number time day days night morning evening week
month year years today tomorrow yesterday hour minute moment life people person man woman men
women child children boy girl friend family mother father brother sister king queen doctor
teacher student worker farmer house home room door window table chair bed wall floor garden
school office shop market bank hospital church car train ship boat plane bike bus food bread
milk tea coffee apple apples orange banana rice meat egg eggs cake music song songs art game
games color red blue green yellow black white gray pink purple head face eye eyes hand hands
foot feet heart mind body voice question questions answer answers problem problems idea ideas
reason way thing things part place point fact case system program computer data model models
memory engine server request response test tests result results value values list set table
error state level mode power energy speed size weight price money work job plan goal rule law
war peace history science math language english french science space planet planets machine
learning network code line lines file files text token tokens prompt output input sleep wake
awake asleep dream dreams go goes went gone come came get got make made take took see saw know
knew think thought say said tell told give gave find found use used want need feel felt try
keep let put seem leave call ask show play run ran walk walked read write wrote learn learned
change follow stop start begin began help turn move live believe bring happen stand lose pay
meet include continue set build stay fall cut reach kill remain suggest raise pass sell require
report decide pull explain describe list count repeat summarize translate compare please thank
thanks hello goodbye welcome sorry okay maybe always never often sometimes usually now later
soon still already yet ever even almost enough really well together alone away back forward
user assistant system
""".split()

_CAPITALISED = """
The A An And But If Then So This That These Those There Here It He She They We You I My Your
What Which Who When Where Why How Once In On At For With From After Before Today Tomorrow
Hello Please Thank Tell Write Explain Describe List Summarize Translate Compare Answer Question
Yes No Paris France London England Berlin Germany Rome Italy Tokyo Japan Europe America Earth
Alice Bob Carol Dave Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February
March April May June July August September October November December
""".split()

_PUNCTUATION = list(".,;:!?'\"()[]{}-+*/=<>%$#@&_") + ["...", "--", "?!", "'s"]
_NUMBERS = [str(n) for n in range(101)] + ["1000", "2024", "2025", "2026"]

BASE_WORDS = tuple(dict.fromkeys(_WORDS + _CAPITALISED + _PUNCTUATION + _NUMBERS))

MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + len(BASE_WORDS)

# A chat template so /v1/chat/completions works too; every word it adds is in the vocabulary.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }} : {{ message['content'] }} "
    "{% endfor %}{% if add_generation_prompt %}assistant : {% endif %}"
)


def vocabulary(vocab_size: int) -> dict[str, int]:
    """Token -> id for exactly `vocab_size` tokens (deterministic, no randomness involved)."""
    fixed = list(SPECIAL_TOKENS) + list(BASE_WORDS)
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size={vocab_size} is smaller than the {MIN_VOCAB_SIZE} fixed tokens; "
            f"use a vocab_size of at least {MIN_VOCAB_SIZE}"
        )
    # Filler words are named after their own id ("w1234" has id 1234), so they cannot collide with
    # the fixed words (none of which is "w" followed by digits).
    tokens = fixed + [f"w{i}" for i in range(len(fixed), vocab_size)]
    return {token: i for i, token in enumerate(tokens)}


def build_tokenizer(vocab_size: int) -> Tokenizer:
    """A WordLevel tokenizer: whitespace/punctuation split, unknown words -> <unk>, decode joins
    tokens with single spaces (WordPiece decoder without cleanup; no token carries the ## prefix)."""
    tokenizer = Tokenizer(models.WordLevel(vocab=vocabulary(vocab_size), unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer


def _write_json(path: str, obj) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def write_tokenizer_files(out_dir: str, vocab_size: int, model_max_length: int) -> list[str]:
    """Writes tokenizer.json, tokenizer_config.json and special_tokens_map.json; returns the paths."""
    tokenizer = build_tokenizer(vocab_size)
    if tokenizer.get_vocab_size(with_added_tokens=True) != vocab_size:
        raise AssertionError(
            f"tokenizer has {tokenizer.get_vocab_size(with_added_tokens=True)} tokens, config says {vocab_size}"
        )
    tokenizer_path = os.path.join(out_dir, "tokenizer.json")
    # tokenizers serialises the WordLevel vocabulary ordered by id, so this is deterministic.
    with open(tokenizer_path, "w", encoding="utf-8") as f:
        f.write(tokenizer.to_str(pretty=True))
        f.write("\n")
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "unk_token": UNK}
    config_path = os.path.join(out_dir, "tokenizer_config.json")
    _write_json(
        config_path,
        {
            **special,
            "add_bos_token": False,
            "add_eos_token": False,
            "chat_template": CHAT_TEMPLATE,
            # Decoding must be a plain space join everywhere (vLLM's incremental detokenizer and
            # transformers' decode), so no "Hello , world" -> "Hello, world" cleanup.
            "clean_up_tokenization_spaces": False,
            "model_max_length": model_max_length,
            "padding_side": "left",
            "tokenizer_class": "PreTrainedTokenizerFast",
        },
    )
    special_path = os.path.join(out_dir, "special_tokens_map.json")
    _write_json(special_path, special)
    return [tokenizer_path, config_path, special_path]
