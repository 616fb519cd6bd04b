"""`tito_fast.chains.ray`: the chains of a table of calls equal `assemble`'s,
in process and on a local Ray cluster (grouped by session)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tito_fast.chains import assemble
from tito_fast.chains.output import chains_table
from tito_fast.chains.ray import BatchAssembler, assemble_table

CALLS = Path(__file__).resolve().parents[2] / "examples" / "qwen3_calls.jsonl"
pytestmark = pytest.mark.filterwarnings("ignore")  # Ray's own deprecation warnings


def _table() -> Any:
    rows = [json.loads(line) for line in CALLS.read_text(encoding="utf-8").splitlines()]
    for r in rows:  # nested JSON as text columns, as a Parquet capture holds them
        for key in ("messages", "tools", "response", "metadata"):
            r[key] = json.dumps(r[key])
    return pa.Table.from_pylist(rows)


def _key(rows: list[dict[str, Any]]) -> list[Any]:
    return sorted((r["session_id"], r["chain"], r["ids"], r["loss_mask"], r["call_index"]) for r in rows)


def test_assemble_table_equals_assemble() -> None:
    want = chains_table(assemble(CALLS, tokenizer="fixture:qwen3", family="qwen3")).to_pylist()
    got = assemble_table(_table(), tokenizer=BatchAssembler("fixture:qwen3").tokenizer, family="qwen3").to_pylist()
    assert _key(got) == _key(want)


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError("the Ray job took longer than 300 s")


def test_ray_map_groups_equals_one_process() -> None:
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    want = chains_table(assemble(CALLS, tokenizer="fixture:qwen3", family="qwen3")).to_pylist()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(300)
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        ds = ray.data.from_arrow(_table()).groupby("session_id").map_groups(
            BatchAssembler, fn_constructor_kwargs={"tokenizer": "fixture:qwen3", "family": "qwen3"},
            batch_format="pyarrow", concurrency=2, num_cpus=0.5,
        )  # fmt: skip
        got = pa.concat_tables(ray.get(ds.to_arrow_refs())).to_pylist()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        ray.shutdown()
    assert _key(got) == _key(want)
