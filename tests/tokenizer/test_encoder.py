"""The Rust encoder gives the tokenizer's ids: on every code point's
pre-tokenizer class, on random text, on rendered conversations, and where it
does not cover a tokenizer or a text it hands the text to the tokenizer."""

from __future__ import annotations

import functools
import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import AddedToken, Regex, Tokenizer
from tokenizers import pre_tokenizers as pt

from tito_fast import TokenInputError, _core, get_tito_tokenizer
from tito_fast.errors import RenderError
from tito_fast.session.verify import ROLE_SETS, TOOLS, conversations
from tito_fast.testing import fixtures
from tito_fast.tokenizer.encoder import DEEPSEEK_SPLITS, O200K, PATTERNS, FastEncoder

# fixture -> the pattern transformers loads it with
COVERED = {
    "qwen3": "qwen", "glm47": "llama3", "llama31": "llama3", "kimi_k2": "qwen", "nemotron3": "qwen", "qwen35": "qwen",
    "deepseek_v3": "deepseek", "deepseek_v31": "deepseek", "deepseek_v4": "deepseek", "minimax_m27": "o200k",
    "qwen25": "qwen", "minimax_m3": "o200k",
}  # fmt: skip
# The Qwen3.5 tokenizer.json read by `tokenizers` itself keeps its own pattern
# (letters with marks); transformers replaces it with the Qwen pattern.
RAW_QWEN35 = "qwen35-raw"
# Qwen3 with added tokens the tokenizer matches after normalizing (none of the
# fixtures has any): one overlaps a token of the first pass, one is not NFC.
NORMALIZED_ADDED = "qwen3-normalized-added"
EXTRA_TOKENS = ["<tool_call>x", "zebra crossing", "ca\u0301fe"]


@functools.cache
def _tokenizer(name: str) -> Any:
    if name == RAW_QWEN35:
        return Tokenizer.from_file(str(fixtures.tokenizer_dir("qwen35") / "tokenizer.json"))
    if name == NORMALIZED_ADDED:
        tok = Tokenizer.from_file(str(fixtures.tokenizer_dir("qwen3") / "tokenizer.json"))
        tok.add_tokens([AddedToken(t, normalized=True) for t in EXTRA_TOKENS])
        return tok
    return fixtures.load_tokenizer(name)


def _encoder(name: str) -> FastEncoder:
    return FastEncoder.for_tokenizer(_tokenizer(name))


def _theirs(name: str, text: str) -> list[int]:
    enc = _encoder(name)
    return list(enc.backend.encode(text, add_special_tokens=False).ids)


def test_covered_fixtures_and_their_patterns() -> None:
    for name, pattern in {**COVERED, RAW_QWEN35: "qwen35", NORMALIZED_ADDED: "qwen"}.items():
        enc = _encoder(name)
        assert (enc.reason, enc.pattern) == (None, pattern), name
    assert FastEncoder.for_tokenizer(_tokenizer("qwen3")) is _encoder("qwen3")  # built once


def _context(c: str) -> str:
    """One code point in contexts that expose its class: letter or not, number,
    white space, punctuation or symbol, mark (joins letters in Qwen3.5 and
    DeepSeek), contraction letter, ASCII letter after ASCII punctuation, and
    o200k's case classes (lower after a lower letter, upper before "Aa", mark
    after punctuation)."""
    return f"x{c}, {c}{c}1{c}'{c} ({c}a {c}A !!{c}{c}Aa\n"


def _reference_split(enc: FastEncoder) -> Any:
    """The tokenizer library's own split for the encoder's splitter."""
    if enc.pattern == "deepseek":
        return pt.Sequence([pt.Split(Regex(r), "isolated") for r in DEEPSEEK_SPLITS])
    if enc.pattern == "o200k":
        return pt.Split(Regex(O200K), "removed", invert=True)  # as MiniMax's tokenizer.json has it
    return pt.Split(Regex(next(r for r, p in PATTERNS.items() if p == enc.pattern)), "isolated")


@pytest.mark.parametrize("name", ["qwen3", "llama31", RAW_QWEN35, "deepseek_v3", "minimax_m27"])
def test_every_code_point_splits_as_the_tokenizer(name: str) -> None:
    """The hand-written split equals the tokenizer's regex split on every code
    point (surrogates cannot be in a UTF-8 text), in contexts that tell its class.
    Planes 4-13 (never assigned) and 15-16 (private use) are sampled."""
    enc = _encoder(name)
    split = _reference_split(enc)
    points = [
        c for c in range(0x110000)
        if not 0xD800 <= c <= 0xDFFF and (c < 0x40000 or 0xE0000 <= c < 0xF0000 or c % 61 == 0)
    ]  # fmt: skip
    bad: list[str] = []
    for i in range(0, len(points), 16384):
        chunk = [chr(c) for c in points[i : i + 16384]]
        text = "".join(map(_context, chunk))
        if enc.pieces(text) != [p for p, _ in split.pre_tokenize_str(text)]:
            bad += [f"U+{ord(c):04X}" for c in chunk if enc.pieces(_context(c)) != [p for p, _ in split.pre_tokenize_str(_context(c))]]
    assert not bad, f"{len(bad)} code points split differently: {bad[:20]}"


FRAGMENTS = [
    "'s", "'LL", "'ſ", "'Re", " '", "\r\n", "\n\n", "  ", "\t", "\u00a0", "\u3000", "123456", "3.14", "e\u0301",
    "\u00e9", "你好", "こんにちは", "🙂", "👍🏽", "مرحبا", "ﬁ", "Ω", "{\"a\": [1, 2]}", "</think>", "<|im_end|>",
    "<|im_start|>", "<tool_call>", "<|eot_id|>", "<|observation|>", "<think>", "def f(x):\n    return x",
    *EXTRA_TOKENS, "<tool_call>xy", "zebra crossing", "caf\u00e9", "HelloWorld", "JSONParser", "\u01c5x", "\u02b0a",
    "a/b//", "WE'LL", "!!\u0301",
]  # fmt: skip
TEXTS = st.lists(st.one_of(st.text(max_size=6), st.sampled_from(FRAGMENTS)), max_size=40).map("".join)


@pytest.mark.parametrize("name", [*COVERED, RAW_QWEN35, NORMALIZED_ADDED])
@given(text=TEXTS)
def test_random_text_gives_the_tokenizer_ids(name: str, text: str) -> None:
    assert _encoder(name).encode(text) == _theirs(name, text)


@pytest.mark.parametrize("name", [*COVERED, RAW_QWEN35, NORMALIZED_ADDED])
def test_added_tokens_and_long_texts(name: str) -> None:
    enc = _encoder(name)
    added = [t.content for t in enc.backend.get_added_tokens_decoder().values()]
    text = "x".join(added) + "".join(added[::-1]) + " ".join(FRAGMENTS)
    assert enc.encode(text) == _theirs(name, text)
    long = (text + "\n") * 40  # well past the size where the encoder releases the GIL
    assert len(long.encode()) > _core.DETACH_MIN
    assert enc.encode(long) == _theirs(name, long)


@pytest.mark.parametrize(
    ("name", "family"),
    [("qwen3", "qwen3"), ("glm47", "glm47"), ("llama31", "llama3"), ("qwen35", "qwen35"), ("deepseek_v3", "default"),
     ("deepseek_v4", "deepseekv4"), ("minimax_m27", "minimax_m27")],
)  # fmt: skip
def test_rendered_conversations_give_the_tokenizer_ids(name: str, family: str) -> None:
    tito = get_tito_tokenizer(_tokenizer(name), family)
    n = 0
    for roles in ROLE_SETS:
        for _, msgs in [*conversations(roles), *conversations(roles, parallel_calls=False)]:
            try:
                text = tito.apply_chat_template(msgs, add_generation_prompt=False, tools=TOOLS)
            except RenderError:
                continue  # a call shape the template refuses (e.g. Llama 3: one tool call at a time)
            assert tito.encode(text) == _theirs(name, text)
            n += 1
    assert n >= 5


def test_normalized_added_tokens_match_in_the_second_pass() -> None:
    enc = _encoder(NORMALIZED_ADDED)
    tok = _tokenizer(NORMALIZED_ADDED)
    first, second = tok.token_to_id("<tool_call>"), tok.token_to_id("<tool_call>x")
    assert second is not None and enc.encode("<tool_call>xy")[0] == first  # the first pass wins
    assert enc.encode("a zebra crossing")[-1] == tok.token_to_id("zebra crossing")
    for text in ["<tool_call>xy", "a zebra crossing", "caf\u00e9!", "ca\u0301fe"]:
        assert enc.encode(text) == _theirs(NORMALIZED_ADDED, text), text


def test_text_nfc_would_change_goes_to_the_tokenizer() -> None:
    enc = _encoder("qwen3")  # NFC normalizer
    before = enc.fallbacks
    text = "cafe\u0301 <|im_end|> x"
    assert enc.encode(text) == _theirs("qwen3", text)
    assert enc.fallbacks == before + 1
    glm = _encoder("glm47")  # no normalizer: nothing to fall back for
    before = glm.fallbacks
    assert glm.encode(text) == _theirs("glm47", text)
    assert glm.fallbacks == before


def _byte_level_only() -> Any:
    """Qwen3 with the GPT-2 byte-level pre-tokenizer (its own regex): not covered."""
    tok = Tokenizer.from_file(str(fixtures.tokenizer_dir("qwen3") / "tokenizer.json"))
    tok.pre_tokenizer = pt.ByteLevel(add_prefix_space=False)
    return tok


def _other_pattern() -> Any:
    """Qwen3 with the GPT-2 pattern in its split: not covered."""
    tok = Tokenizer.from_file(str(fixtures.tokenizer_dir("qwen3") / "tokenizer.json"))
    gpt2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
    tok.pre_tokenizer = pt.Sequence([pt.Split(Regex(gpt2), "isolated"), pt.ByteLevel(add_prefix_space=False, use_regex=False)])
    return tok


@pytest.mark.parametrize(("name", "why"), [("other-pattern", "not a covered pattern"), ("byte-level-only", "not a sequence")])
def test_uncovered_tokenizers_encode_with_the_tokenizer(name: str, why: str) -> None:
    enc = FastEncoder(_byte_level_only() if name == "byte-level-only" else _other_pattern())
    assert enc.reason is not None and why in enc.reason
    text = "Hello 12345 你好 " + " ".join(FRAGMENTS)
    assert enc.encode(text) == list(enc.backend.encode(text, add_special_tokens=False).ids)
    with pytest.raises(ValueError, match="no Rust encoder"):
        enc.pieces(text)


def test_family_encode_is_the_tokenizer_encode_with_or_without_it() -> None:
    tok = _tokenizer("qwen3")
    on, off = get_tito_tokenizer(tok, "qwen3"), get_tito_tokenizer(tok, "qwen3", fast_encode=False)
    assert on.fast_encoder is _encoder("qwen3") and off.fast_encoder is None
    text = " ".join(FRAGMENTS)
    assert on.encode(text) == off.encode(text) == list(tok.encode(text, add_special_tokens=False))


def _args(**over: Any) -> dict[str, Any]:
    vocab = [bytes([b]) for b in range(256)]
    args: dict[str, Any] = dict(
        token_blob=b"".join(vocab), token_offsets=list(range(257)), token_ids=list(range(256)), merges=[],
        ignore_merges=False, pattern="qwen", raw_added=[], normalized_added=[], nfc=False,
    )  # fmt: skip
    args.update(over)
    return args


@pytest.mark.parametrize(
    ("over", "argument", "message"),
    [
        ({"pattern": "gpt2"}, "pattern", "unknown pattern"),
        ({"token_offsets": list(range(256))}, "token_offsets", "one entry more"),
        ({"token_offsets": [*range(256), 999]}, "token_offsets", "outside the blob"),
        ({"token_ids": [*range(255), -1]}, "token_ids", "negative"),
        ({"merges": [1, 2]}, "merges", "triples"),
        ({"merges": [1, 2, 3, 1, 2, 4]}, "merges", "repeats"),
        ({"token_blob": bytes(256), "token_ids": list(range(256))}, "token_ids", "byte 0x01 has no token"),
        ({"raw_added": [("", 5)]}, "raw_added", "empty"),
    ],
)
def test_bad_construction_input_names_the_argument(over: dict[str, Any], argument: str, message: str) -> None:
    with pytest.raises(TokenInputError, match=message) as info:
        _core.BpeEncoder(**_args(**over))
    assert info.value.argument == argument


def test_threads_share_one_encoder() -> None:
    enc = _encoder("qwen3")
    texts = [" ".join(FRAGMENTS[k:] + FRAGMENTS[:k]) * 30 for k in range(8)]
    expected = [_theirs("qwen3", t) for t in texts]
    results: dict[int, list[list[int]]] = {}

    def work(k: int) -> None:
        results[k] = [enc.encode(t) for t in texts for _ in range(3)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        assert results[k] == [e for e in expected for _ in range(3)]


def test_a_changed_tokenizer_is_followed() -> None:
    """Adding tokens, truncation and special-token splitting change ids: the
    encoder notices on the next call and rebuilds (or hands over)."""
    tok = Tokenizer.from_file(str(fixtures.tokenizer_dir("qwen3") / "tokenizer.json"))  # a private copy
    enc = FastEncoder(tok)
    text = "a <zz> b <|im_end|> " + " ".join(FRAGMENTS)

    def same() -> bool:
        return enc.encode(text) == list(tok.encode(text, add_special_tokens=False).ids)

    assert same() and enc.rebuilds == 0
    tok.add_tokens(["<zz>"])
    assert same() and enc.rebuilds == 1 and enc.reason is None
    assert tok.token_to_id("<zz>") in enc.encode(text)
    tok.enable_truncation(5)
    assert same() and len(enc.encode(text)) == 5 and enc.reason is not None and "truncates" in enc.reason
    tok.no_truncation()
    assert same() and enc.reason is None and enc.rebuilds == 3
    tok.encode_special_tokens = True
    assert same() and enc.reason is not None and "special tokens" in enc.reason
