"""`tito_fast.score.ray` on a local Ray cluster with 2 CPUs: the same results as one process."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tito_fast.score.dump import row_sizes, to_arrow, write_parquet
from tito_fast.score.ray import BatchScorer as RayScorer
from tito_fast.score.ray import results_from_table, score_batch, summarize_table
from tito_fast.score.run import run_score
from tito_fast.score.scorer import Scorer
from tito_fast.testing import fixtures

ray = pytest.importorskip("ray", reason="the ray extra is not installed")
pytestmark = pytest.mark.filterwarnings("ignore")  # Ray's own deprecation warnings
DUMP = Path(__file__).resolve().parents[2] / "examples" / "qwen3_dump.jsonl"


def _rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DUMP.read_text(encoding="utf-8").splitlines()]


def test_score_batch_in_process() -> None:
    rows = _rows()
    scorer = Scorer(fixtures.load_tokenizer("qwen3"), "qwen3")
    table = to_arrow(rows[:6] + [dict(rows[0], token_ids=[1, 2, 10_000_000])])
    out = score_batch(table, scorer)
    assert out.num_rows == 7 and out.column("ok").to_pylist() == [True] * 6 + [False]
    assert "outside the vocabulary" in out.column("error").to_pylist()[6]
    results, bad = results_from_table(out)
    single = run_score(DUMP, "fixture:qwen3", "qwen3", scorer=scorer).results[:6]
    assert [r.to_dict() for r in results] == [dict(r.to_dict(), source=f"row {i}") for i, r in enumerate(single)]
    assert len(bad) == 1


def test_score_batch_refuses_a_row_over_the_record_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Ray door bounds a row as the dump's line limit bounds a line: a bad
    record `too_large`, its neighbours scored, never turned into Python objects."""
    rows = _rows()
    scorer = Scorer(fixtures.load_tokenizer("qwen3"), "qwen3")
    table = to_arrow(rows[:3])
    sizes = row_sizes(table).tolist()  # as the dump's limit counts a row
    monkeypatch.setattr("tito_fast.score.dump.MAX_RECORD_BYTES", sorted(sizes)[1])  # the largest row is over it (the one bound)
    out = score_batch(table, scorer)
    big = sizes.index(max(sizes))
    assert out.column("ok").to_pylist() == [i != big for i in range(3)]
    assert "over the limit" in out.column("error").to_pylist()[big]


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError("the Ray job took longer than 300 s")


def test_ray_data_equals_single_process(tmp_path: Path) -> None:
    path = tmp_path / "dump.parquet"
    write_parquet(path, _rows())
    single = run_score(path, "fixture:qwen3", "qwen3")
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(300)
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        ds = ray.data.read_parquet(str(path)).map_batches(
            RayScorer,
            fn_constructor_kwargs={"tokenizer": "fixture:qwen3", "family": "qwen3"},
            batch_format="pyarrow",
            batch_size=8,
            concurrency=2,
            num_cpus=0.5,  # fractional: two actors and the read tasks share the 2 CPUs
        )
        import pyarrow as pa

        table = pa.concat_tables(ray.get(ds.to_arrow_refs()))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        ray.shutdown()
    assert table.num_rows == len(single.results)
    got = {r["session_id"]: r for r in table.to_pylist()}
    for r in single.results:
        row = got[r.session_id]
        assert row["ok"] and json.loads(row["mismatches"]) == [m.to_dict() for m in r.mismatches]
        assert json.loads(row["items"]) == [i.to_dict() for i in r.items]
        assert row["first_divergence"] == r.first_divergence
    summary = summarize_table(table, family="qwen3")
    assert summary.metrics == single.summary.metrics and summary.by_kind == single.summary.by_kind
