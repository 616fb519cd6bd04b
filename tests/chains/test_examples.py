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
