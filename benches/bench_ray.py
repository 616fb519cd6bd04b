"""The Ray Data path's throughput per worker, on agent sessions
(`benches.agent_dumps`, Qwen3: 3-150 turns, long tool outputs, 75%
differing) as a Parquet dump.

`score_batch`: what each Ray worker runs on a batch (`tito_fast.score.ray.
score_batch`: the rows handed to the native session check, one thread, ids
read in place from the Arrow buffers; differing sessions diagnosed in
Python), in this process, the scorer built; `score_batch_python_path`: the
same with the native check off (every row read, rendered, encoded and
compared on the Python path, as Ray workers did before it took rows);
`cli_parquet_1_thread` / `cli_jsonl_1_thread`: `run_score` on the same
sessions as Parquet and as JSONL (the native check, one thread), the CLI's
path; `ray_1_worker` / `ray_2_workers`: `ray.data.read_parquet(...)
.map_batches(BatchScorer, concurrency=k, num_cpus=1)` materialised, Ray
already started (full size only: starting a Ray cluster costs more than
the test run's small dump). The same reference mismatch lists in every row.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from benches import agent_dumps
from tito_fast.score.dump import write_jsonl, write_parquet
from tito_fast.score.ray import BatchScorer, results_from_table, score_batch
from tito_fast.score.run import run_score
from tito_fast.score.scorer import Scorer


def _dumps(factory: pytest.TempPathFactory, n: int, max_turns: int) -> tuple[Path, Path]:
    base = factory.getbasetemp()
    pq, jl = base / f"ray-qwen3-{n}.parquet", base / f"ray-qwen3-{n}.jsonl"
    if not pq.exists():
        rows = agent_dumps.records("qwen3", n, max_turns=max_turns)
        write_parquet(pq, rows)
        write_jsonl(jl, rows)
    return pq, jl


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Ray Data's own, on its internal settings
@pytest.mark.parametrize(
    "impl", ["score_batch", "score_batch_python_path", "cli_parquet_1_thread", "cli_jsonl_1_thread", "ray_1_worker", "ray_2_workers"]
)
def bench_ray(benchmark: Any, full_size: bool, impl: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    n = 120 if full_size else 3
    pq, jl = _dumps(tmp_path_factory, n, 150 if full_size else 6)
    benchmark.group = f"Ray Data path: score {n} Qwen3 agent sessions (Parquet)"
    benchmark.extra_info["sessions"] = n
    rounds = {"rounds": 3 if full_size else 1, "iterations": 1}
    tito = agent_dumps.tito_for("qwen3")
    if impl.startswith("score_batch"):
        import pyarrow.parquet as pq_

        table = pq_.read_table(pq)
        scorer = Scorer(tito=tito)
        if impl == "score_batch_python_path":
            scorer.native = None
        out = benchmark.pedantic(lambda: score_batch(table, scorer), **rounds)
        results, bad = results_from_table(out)
    elif impl.startswith("cli_"):
        scorer = Scorer(tito=tito)
        path = pq if impl == "cli_parquet_1_thread" else jl
        run = benchmark.pedantic(lambda: run_score(path, threads=1, scorer=scorer), **rounds)
        results, bad = list(run.results), list(run.bad)
    else:
        if not full_size:
            pytest.skip("a Ray cluster's start costs more than this run's small dump; full size only")
        import ray

        if not ray.is_initialized():
            # one logical CPU more than the cores: the actors take one each, the Parquet reads need one too
            ray.init(num_cpus=(os.cpu_count() or 1) + 1, include_dashboard=False, log_to_driver=False)
        k = 1 if impl == "ray_1_worker" else 2
        kwargs = {"tokenizer": "fixture:qwen3", "family": "qwen3"}

        def once() -> Any:
            ds = ray.data.read_parquet(str(pq)).repartition(4 * k).map_batches(
                BatchScorer, fn_constructor_kwargs=kwargs, batch_format="pyarrow", concurrency=k, num_cpus=1, batch_size=8
            )
            import pyarrow as pa

            return pa.concat_tables(ray.get(ds.to_arrow_refs()))

        out = benchmark.pedantic(once, **rounds)
        results, bad = results_from_table(out)
        benchmark.extra_info["workers"] = k
    assert not bad and len(results) == n
    lists = sorted((r.session_id, json.dumps([m.to_dict() for m in r.mismatches])) for r in results)
    _LISTS.setdefault(n, lists)
    assert lists == _LISTS[n]


_LISTS: dict[int, Any] = {}
