"""Results in the dump's terms: `message_index` indexes the record's
`messages` and `role` is that message's role, whatever blocks the template
renders (GLM's tool list, Qwen's tool results inside a user block)."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import numpy as np
import pytest

from tests.score.test_report import outside_code_spans
from tito_fast.score.dump import Record
from tito_fast.score.report import markdown_report
from tito_fast.score.scorer import Scorer
from tito_fast.score.summary import summarize
from tito_fast.testing import fixtures

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a careful coding agent."},
    {"role": "user", "content": "Read a.txt and b.txt."},
    {
        "role": "assistant",
        "content": "Reading both.",
        "reasoning_content": "Two reads.",
        "tool_calls": [
            {"type": "function", "function": {"name": "read_file", "arguments": {"path": "a.txt"}}},
            {"type": "function", "function": {"name": "read_file", "arguments": {"path": "b.txt"}}},
        ],
    },
    {"role": "tool", "content": "alpha contents"},
    {"role": "tool", "content": "beta contents"},
    {"role": "assistant", "content": "Both read.", "reasoning_content": "Done."},
    {"role": "user", "content": "Thanks, now summarise."},
    {"role": "assistant", "content": "Summary: alpha and beta.", "reasoning_content": "Short."},
]


@functools.cache
def _scorer(fixture: str, family: str) -> Scorer:
    return Scorer(fixtures.load_tokenizer(fixture), family)


def _record(scorer: Scorer, changed: list[dict[str, Any]], session_id: str = "s") -> Record:
    """A record of MESSAGES whose ids are those of `changed` (what the engine saw)."""
    engine = Record("d.jsonl:1", session_id, changed, np.zeros(0, dtype=np.uint32), TOOLS)
    ids = scorer.expected_ids(engine)
    return Record("d.jsonl:1", session_id, copy.deepcopy(MESSAGES), ids, TOOLS)


@pytest.mark.parametrize(("fixture", "family"), [("qwen3", "qwen3"), ("glm47", "glm47"), ("minimax_m27", "minimax_m27")])
@pytest.mark.parametrize("k", [1, 3, 4, 5, 6])
def test_message_index_is_the_records(fixture: str, family: str, k: int) -> None:
    scorer = _scorer(fixture, family)
    changed = copy.deepcopy(MESSAGES)
    changed[k]["content"] = changed[k]["content"] + " (edited)"
    result = scorer.score(_record(scorer, changed))
    assert result.items, (family, k)
    item = result.items[0]
    assert (item.message_index, item.role) == (k, MESSAGES[k]["role"]), (family, k, item)
    assert item.turn == sum(m["role"] == "assistant" for m in MESSAGES[:k])


@pytest.mark.parametrize("k", [3, 4])
def test_a_qwen3_tool_result_is_a_tool_message_rendered_in_a_user_block(k: int) -> None:
    # Qwen3 renders both results in one user block, each in <tool_response> tags.
    scorer = _scorer("qwen3", "qwen3")
    changed = copy.deepcopy(MESSAGES)
    changed[k]["content"] = "changed"
    (item,) = scorer.score(_record(scorer, changed)).items
    assert (item.role, item.marker_role, item.message_index) == ("tool", "tool", k)


def test_a_difference_in_glms_tool_list_is_outside_the_messages() -> None:
    scorer = _scorer("glm47", "glm47")
    engine = Record("d.jsonl:1", "s", MESSAGES, np.zeros(0, dtype=np.uint32), [dict(TOOLS[0], function=dict(TOOLS[0]["function"], description="Read one file."))])
    rec = Record("d.jsonl:1", "s", MESSAGES, scorer.expected_ids(engine), TOOLS)
    (item,) = scorer.score(rec).items
    assert item.message_index == -1 and item.role == "system" and item.turn == 0


def test_a_record_without_role_markers_is_scored() -> None:
    scorer = _scorer("qwen3", "qwen3")
    tok = scorer.tito.tokenizer
    ids = np.asarray(tok.encode("plain text with no chat markers at all", add_special_tokens=False), dtype=np.uint32)
    result = scorer.score(Record("d.jsonl:1", "s", [{"role": "user", "content": "hi"}], ids))
    assert result.mismatches and all(-1 <= it.message_index < 1 for it in result.items)


def test_markdown_escapes_what_records_hold() -> None:
    scorer = _scorer("qwen3", "qwen3")
    changed = copy.deepcopy(MESSAGES)
    changed[1]["content"] = "Read <b>a.txt</b> | and `b.txt`."
    result = scorer.score(_record(scorer, changed, session_id="<script>alert(1)</script>"))
    result.metadata = {"note": "<img src=x onerror=alert(1)>"}
    s = summarize([result], [], family="qwen3", mode="full", fast_path="off")
    md = markdown_report(s, [result])
    # Record text sits in code spans (which Markdown shows as text), not as HTML entities.
    assert "`<script>alert(1)</script>`" in md and "<img src=x onerror=alert(1)>" in md
    prose = outside_code_spans(md)
    assert "<" not in prose.replace("\\<", "") and "&lt;" not in md and "&amp;" not in md
    json.dumps(result.to_dict())
