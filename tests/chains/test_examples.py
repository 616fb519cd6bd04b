"""`tito-fast assemble` on the shipped capture file (real Qwen3 tokenizer and
template): each planted event is named, with the right diagnosis; the chains
written out read back equal; the invariant holds on every chain."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from tito_fast.chains import assemble
from tito_fast.cli.main import cli
from tito_fast.testing import assemble_reference as ref

ROOT = Path(__file__).resolve().parents[2]
CALLS = ROOT / "examples" / "qwen3_calls.jsonl"

#: (session, call_index, kind, policy, diagnosis) planted by examples/make_calls.py
PLANTED = [
    ("retry-0", 3, "rollback", "fork", None),
    ("compaction-0", 3, "rewrite", "fork", "content"),
    ("sub_agent-0", 2, "new_root", "fork", "content"),
    ("retokenized_seam-0", 3, "seam_drift", "realign", "retokenization"),
    ("reasoning_dropped-0", 1, "rewrite", "fork", "content"),
    ("reasoning_dropped-0", 2, "rewrite", "fork", "content"),
]


def test_cli_names_every_planted_event(tmp_path: Path) -> None:
    out, js, report = tmp_path / "chains.parquet", tmp_path / "a.json", tmp_path / "a.html"
    code = cli("assemble", str(CALLS), "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--out", str(out),
               "--json", str(js), "--report", str(report), "--quiet")  # fmt: skip
    assert code == 0
    d = json.loads(js.read_text())
    named = [(e["session_id"], e["call_index"], e["kind"], e["policy"], e["diagnosis"]) for e in d["events"] if e["kind"] != "extend"]
    assert named == PLANTED
    assert {e["session_id"] for e in d["events"] if e["kind"] == "extend"} == {"sub_agent-0"}  # back and forth between agents
    assert d["summary"]["sessions"] == 6 and d["summary"]["chains_per_session"]["1"] == 2  # plain, retokenized seam
    html = report.read_text()
    assert "where the sampled ids went" in html and "rollback" in html
    a = assemble(CALLS, tokenizer="fixture:qwen3", family="qwen3")
    table = pq.read_table(out).to_pylist()
    assert len(table) == a.summary.chains
    for row, chain in zip(table, a.chains()):
        assert row["ids"] == chain.ids.tolist() and row["loss_mask"] == chain.loss_mask.tolist()
        assert [x is None for x in row["logprobs"]] == [math.isnan(x) for x in chain.logprobs.tolist()]
        assert row["call_index"] == chain.call_index.tolist()


def test_invariant_and_roles_on_the_examples() -> None:
    rows: list[dict[str, Any]] = [json.loads(line) for line in CALLS.read_text().splitlines()]
    a = assemble(CALLS, tokenizer="fixture:qwen3", family="qwen3")
    for sid, chains in a.sessions.items():
        calls = [(r["prompt_ids"], r["completion_ids"], r["completion_logprobs"]) for r in rows if r["session_id"] == sid]
        got = {
            "chains": [{"ids": c.ids.tolist(), "loss": c.loss_mask.tolist(), "logprobs": c.logprobs.tolist(), "calls": c.call_index.tolist()} for c in chains],
            "events": [e.to_dict() for e in a.events if e.session_id == sid],
        }
        ref.check_invariant([(p, c, [float(np.float32(x)) for x in lp]) for p, c, lp in calls], got)
        for c in chains:  # sampled ids sit in assistant blocks
            roles = c.role
            assert {roles[i] for i in range(len(c)) if c.loss_mask[i]} == {"assistant"}


def test_parquet_capture_equals_jsonl(tmp_path: Path) -> None:
    import pyarrow as pa

    rows = [json.loads(line) for line in CALLS.read_text().splitlines()]
    for r in rows:  # nested values as JSON text columns
        for key in ("messages", "tools", "response", "metadata"):
            r[key] = json.dumps(r[key])
    path = tmp_path / "calls.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    a, b = assemble(path), assemble(CALLS)
    assert [c.ids.tolist() for c in a.chains()] == [c.ids.tolist() for c in b.chains()]
    assert [e.to_dict() | {"source": ""} for e in a.events] == [e.to_dict() | {"source": ""} for e in b.events]
    assert a.events[0].source.startswith("calls.parquet:row ")


def _message_runs(chain: Any) -> dict[int, str]:
    """Each message index of a chain and the text of its ids."""
    from tito_fast.tokenizer.load import load_tokenizer

    tok = load_tokenizer("fixture:qwen3")
    index = chain.message_index
    return {int(i): tok.decode(chain.ids[index == i].tolist()) for i in np.unique(index)}


def _own_texts(message: dict[str, Any]) -> list[str]:
    """Texts a message's render holds verbatim: its stripped content, else its reasoning, else a tool name."""
    out = [v.strip()[:200] for v in (message.get("content"), message.get("reasoning_content")) if isinstance(v, str) and v.strip()]
    names = [c["function"]["name"] for c in message.get("tool_calls") or [] if c.get("function", {}).get("name")]
    return out + names[:1]


def test_message_index_names_the_request_messages(tmp_path: Path) -> None:
    """With the calls' messages, each id's message is the request's: every
    message's text lies in its own ids, the completion is the response
    (message len(messages), an assistant), and a Parquet capture (messages
    as JSON text) gives the same."""
    rows = {(r["session_id"], r["call_index"]): r for r in map(json.loads, CALLS.read_text().splitlines())}
    a = assemble(CALLS, tokenizer="fixture:qwen3", family="qwen3")
    for chain in a.chains():
        last = rows[(chain.session_id, int(chain.call_index[-1]))]
        messages = last["messages"]
        runs = _message_runs(chain)
        for i, m in enumerate(messages):
            for probe in _own_texts(m)[:1]:
                assert probe in runs[i], (chain.session_id, i)
        n_prompt = len(last["prompt_ids"])
        assert (chain.message_index[n_prompt:] == len(messages)).all()
        roles = chain.role
        assert set(roles[n_prompt:]) <= {"assistant"}
        assert [roles[int(np.argmax(chain.message_index == i))] for i in range(len(messages))] == [m["role"] for m in messages]
    reasoning = a.sessions["reasoning_dropped-0"][0]  # no system message: the template's system block comes first
    assert reasoning.message_index[0] == -1 and reasoning.role[0] == "system"
    rewrite = next(e for e in a.events if e.session_id == "compaction-0" and e.kind == "rewrite")
    assert (rewrite.message_index, rewrite.role) == (1, "user")  # the compacted history departs in the user message
    table = [dict(r) for r in rows.values()]
    for r in table:
        for key in ("messages", "tools", "response", "metadata"):
            r[key] = json.dumps(r[key])
    path = tmp_path / "calls.parquet"
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(table), path)
    b = assemble(path, tokenizer="fixture:qwen3", family="qwen3")
    for x, y in zip(a.chains(), b.chains()):
        assert x.message_index.tolist() == y.message_index.tolist() and x.role == y.role
    assert [(e.message_index, e.role) for e in a.events] == [(e.message_index, e.role) for e in b.events]


def test_message_index_on_every_message_shape() -> None:
    """Several tool calls in one turn (their results rendered in one user
    block), an assistant turn with no text, one without reasoning, an empty
    tool result: each message keeps its own ids. Without messages, ids are
    numbered by rendered block (the comparator's role markers)."""
    from tito_fast.chains import Call
    from tito_fast.chat.families import get_tito_tokenizer
    from tito_fast.tokenizer.load import load_tokenizer

    tito = get_tito_tokenizer(load_tokenizer("fixture:qwen3"), "qwen3")

    def call(name: str, k: int) -> dict[str, Any]:
        return {"id": f"c{k}", "type": "function", "function": {"name": name, "arguments": {"path": f"f{k}.py"}}}

    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "The parser fails on trailing commas."},
        {"role": "assistant", "content": "", "reasoning_content": "Look at both files.", "tool_calls": [call("read_file", 1), call("grep_files", 2)]},
        {"role": "tool", "tool_call_id": "c1", "content": "def parse(s): return s.split(',')"},
        {"role": "tool", "tool_call_id": "c2", "content": ""},
        {"role": "assistant", "content": "The reader keeps an empty last field; I strip it now."},
        {"role": "user", "content": "Thanks, run the tests."},
    ]
    prompt = np.asarray(tito.encode(tito.apply_chat_template(messages, add_generation_prompt=True)), dtype=np.uint32)
    completion = np.asarray(tito.encode("All tests pass.<|im_end|>"), dtype=np.uint32)
    with_messages = assemble([Call("s", prompt, completion, messages=messages)], tokenizer="fixture:qwen3", family="qwen3")
    chain = with_messages.sessions["s"][0]
    runs = _message_runs(chain)
    assert sorted(runs) == list(range(len(messages) + 1))
    assert "read_file" in runs[2] and "grep_files" in runs[2] and "Look at both files." in runs[2]
    assert "def parse" in runs[3] and "def parse" not in runs[4]  # the two results share a user block, each has its own ids
    assert "tool_response" in runs[4]  # the empty result keeps its wrapper
    assert "strip it now" in runs[5] and "run the tests" in runs[6] and "All tests pass." in runs[7]
    assert [chain.role[int(np.argmax(chain.message_index == i))] for i in range(8)] == [m["role"] for m in messages] + ["assistant"]
    blocks = assemble([Call("s", prompt, completion)], tokenizer="fixture:qwen3", family="qwen3").sessions["s"][0]
    table = tito.create_comparator().role_tracker.table(prompt)
    assert blocks.message_index[: len(prompt)].tolist() == (np.searchsorted(table.starts, np.arange(len(prompt)), side="right") - 1).tolist()
    assert blocks.message_index[-1] == len(table.starts) - 1  # the completion: in the generation prompt's block


def test_the_forest_picture_in_the_docs_is_the_example() -> None:
    """docs/assemble.md draws the example's sub-agent and retry sessions: the
    picture is `forest_text` of the example capture, and the main agent
    resumes its own chain after its sub-agent."""
    from tito_fast.chains.output import forest_text

    a = assemble(CALLS, tokenizer="fixture:qwen3", family="qwen3")
    page = (ROOT / "docs" / "assemble.md").read_text(encoding="utf-8")
    section = page.split("## Sessions as a forest", 1)[1]
    block = section.split("```text\n", 1)[1].split("```", 1)[0]
    assert block == forest_text(a, "sub_agent-0") + "\n" + forest_text(a, "retry-0") + "\n"
    groups = sorted(sorted(set(c.span_call.tolist())) for c in a.sessions["sub_agent-0"])
    assert groups == [[0, 1, 3, 5, 6], [2, 4]]
