"""The field report (../shared/docs/field-report.md), reproduced on the real
Llama 3.1 tokenizer and template.

The template trims message content (`| trim`), so an assistant body the model
generated with surrounding whitespace renders differently from what the
session accumulated. The reference comparator calls that difference
`non_assistant_text` (with family `default` every text difference is; with
an assistant start string it still is, because in Llama 3 the role name sits
in its own segment between `<|start_header_id|>` and `<|end_header_id|>`,
one segment further back than the reference looks). The diagnosis says what
it is: an assistant message, whitespace only.
"""

from __future__ import annotations

import base64
import random
from typing import Any

import pytest

from tests.compare.test_comparator_parity import _tokenizer
from tito_fast import TokenSeqComparator
from tito_fast.testing import fixtures
from tito_fast.testing.reference import ReferenceComparator

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test."},
    {"role": "assistant", "content": "Running the tests first."},
    {"role": "user", "content": "ok"},
    {"role": "assistant", "content": "The fix is in parser.rs."},
    {"role": "user", "content": "thanks"},
]
GENERATED = {2: "  Running the tests first.\n\n", 4: "The fix is in parser.rs.\n"}  # as sampled


def _session() -> tuple[list[int], list[int]]:
    """(fresh render, ids the session accumulated) for the same conversation."""
    tok = _tokenizer("llama31")
    rendered = tok.apply_chat_template(MESSAGES, tokenize=False)
    accumulated = rendered
    for i, body in GENERATED.items():
        accumulated = accumulated.replace(MESSAGES[i]["content"], body, 1)
    assert accumulated != rendered

    def enc(text: str) -> list[int]:
        return list(tok.encode(text, add_special_tokens=False))

    return enc(rendered), enc(accumulated)


@pytest.mark.parametrize("assistant_start", [None, "<|start_header_id|>assistant"])
def test_reference_calls_trimmed_assistant_bodies_non_assistant(assistant_start: str | None) -> None:
    tok = _tokenizer("llama31")
    expected, actual = _session()
    fast = TokenSeqComparator(tok, assistant_start)
    ref = ReferenceComparator(tok, assistant_start)
    got = [m.to_dict() for m in fast.compare_sequences(expected, actual)]
    assert got == ref.compare(expected, actual)
    assert [m["type"] for m in got] == ["non_assistant_text", "non_assistant_text"]


def test_diagnosis_says_assistant_whitespace_only() -> None:
    tok = _tokenizer("llama31")
    expected, actual = _session()
    d = TokenSeqComparator(tok, None).diagnose(expected, actual)
    assert d.scheme == "llama3"
    assert [(i.role, i.message_index, i.kind, i.type) for i in d.items] == [
        ("assistant", 2, "whitespace_only", "non_assistant_text"),
        ("assistant", 4, "whitespace_only", "non_assistant_text"),
    ]
    assert d.by_kind() == {"whitespace_only": 2} and d.by_role() == {"assistant": 2}


def test_rebuilt_llama3_tokenizer_matches_tiktoken() -> None:
    """The tokenizer.json rebuilt from Meta's ranks encodes like tiktoken itself."""
    tiktoken = pytest.importorskip("tiktoken")
    tok = _tokenizer("llama31")
    ranks = {}
    for line in (fixtures.tokenizer_dir("llama31") / "tokenizer.model").read_bytes().splitlines():
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    enc = tiktoken.Encoding("llama3", pat_str=fixtures.LLAMA3_SPLIT, mergeable_ranks=ranks, special_tokens={})
    assert tok.encode("This is a test sentence.") == [128000, 2028, 374, 264, 1296, 11914, 13]
    rng = random.Random(0)
    alphabet = "abcdefghij KLMNOP 0123456789 .,;:!?'\"\n\t()[]{}<>/\\|-_=+*&^%$#@~` éüñ你好世界🙂 it's we'll I'M  \n\n   "
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 80)))
        assert tok.encode(text, add_special_tokens=False) == enc.encode(text), repr(text)
