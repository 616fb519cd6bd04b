"""Score dumps on Ray Data: `score_batch(pyarrow.Table) -> pyarrow.Table` and a callable class.

Install with the `ray` extra (`pip install 'tito_fast[ray]'`). The input
table has the dump's Parquet columns (`messages`, `token_ids`, optional
`tools`, `session_id`, `family`, `metadata`; see `tito_fast.score.dump`). Each
output row is one session: `session_id`, `source`, `ok`, `error`, `turns`,
`num_ids`, `num_mismatches`, `mismatch_types`, `first_divergence`, `path`,
and the full `mismatches` / `items` lists as JSON strings. `results_from_table`
turns the rows back into `SessionResult`s for `tito_fast.score.summarize`.

Example:
    >>> import ray  # doctest: +SKIP
    >>> ds = ray.data.read_parquet("dump.parquet")  # doctest: +SKIP
    >>> out = ds.map_batches(  # doctest: +SKIP
    ...     BatchScorer, fn_constructor_kwargs={"tokenizer": "/models/qwen3", "family": "qwen3"},
    ...     batch_format="pyarrow", concurrency=4, num_cpus=1)
    >>> summary = summarize_table(out.to_arrow_refs())  # doctest: +SKIP
"""

from __future__ import annotations

import json
from typing import Any

from tito_fast.compare.alignment import Mismatch
from tito_fast.score.dump import BadRecord, record_from_row
from tito_fast.score.run import build_scorer, score_one
from tito_fast.score.scorer import Mode, ScoredItem, SessionResult
from tito_fast.score.scorer import Scorer as SessionScorer
from tito_fast.score.summary import Summary, summarize


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("session_id", pa.string()),
            ("source", pa.string()),
            ("ok", pa.bool_()),
            ("error", pa.string()),
            ("turns", pa.int32()),
            ("num_ids", pa.int64()),
            ("num_mismatches", pa.int32()),
            ("mismatch_types", pa.list_(pa.string())),
            ("first_divergence", pa.int64()),
            ("path", pa.string()),
            ("encoded_segments", pa.int32()),
            ("segments", pa.int32()),
            ("mismatches", pa.string()),
            ("items", pa.string()),
            ("metadata", pa.string()),
        ]
    )


def score_batch(table: Any, scorer: SessionScorer, *, row_offset: int = 0) -> Any:
    """Score every row of `table` (a pyarrow Table in the dump layout); one output row per input row.

    Bad rows are not raised: they come back with `ok=False` and the reason in `error`.
    """
    import pyarrow as pa

    cols = table.to_pydict()
    n = table.num_rows
    out: dict[str, list[Any]] = {name: [] for name in _schema().names}
    missing = {"messages", "token_ids"} - set(cols)
    for i in range(n):
        source = f"row {row_offset + i}"
        if missing:
            res: SessionResult | BadRecord = BadRecord(source, f"missing column(s) {sorted(missing)}")
        else:
            res = score_one(scorer, record_from_row(source, str(row_offset + i), {k: v[i] for k, v in cols.items()}, json_strings=True))
        row: dict[str, Any]
        if isinstance(res, BadRecord):
            row = {name: None for name in out}
            row.update(session_id=res.session_id, source=res.source, ok=False, error=res.reason, mismatch_types=[])
        else:
            row = {
                "session_id": res.session_id,
                "source": res.source,
                "ok": True,
                "error": None,
                "turns": res.turns,
                "num_ids": res.num_ids,
                "num_mismatches": len(res.mismatches),
                "mismatch_types": sorted({m.type.value for m in res.mismatches}),
                "first_divergence": res.first_divergence,
                "path": res.path,
                "encoded_segments": res.encoded_segments,
                "segments": res.segments,
                "mismatches": json.dumps([m.to_dict() for m in res.mismatches], ensure_ascii=False),
                "items": json.dumps([i.to_dict() for i in res.items], ensure_ascii=False),
                "metadata": None if res.metadata is None else json.dumps(res.metadata, ensure_ascii=False),
            }
        for name in out:
            out[name].append(row[name])
    return pa.Table.from_pydict(out, schema=_schema())


class BatchScorer:
    """A Ray Data callable class: the tokenizer, family, byte table and comparator
    are built once per actor in `__init__`, then every batch is scored.

    Args:
        tokenizer: a tokenizer directory on every node (or `fixture:NAME`).
        family: a family name or a `FamilyConfig` dict.
        template: a chat template text replacing the tokenizer's.
        encoder_path: DeepSeek V3.2/V4's encoder module file (else found where users have it).
        mode: "fast" or "full" (see `tito_fast.score`).
    """

    def __init__(
        self, tokenizer: str, family: Any = "default", template: str | None = None, mode: Mode = "fast", encoder_path: str | None = None
    ) -> None:
        self.scorer = build_scorer(tokenizer, family, template, mode, encoder_path)

    def __call__(self, batch: Any) -> Any:
        return score_batch(batch, self.scorer)


def results_from_table(table: Any) -> tuple[list[SessionResult], list[BadRecord]]:
    """Rows of `score_batch` outputs back as results and bad records."""
    results: list[SessionResult] = []
    bad: list[BadRecord] = []
    for row in table.to_pylist():
        if not row["ok"]:
            bad.append(BadRecord(row["source"], row["error"], row["session_id"]))
            continue
        results.append(
            SessionResult(
                row["session_id"],
                row["source"],
                row["turns"],
                row["num_ids"],
                [Mismatch.from_dict(m) for m in json.loads(row["mismatches"])],
                [ScoredItem.from_dict(i) for i in json.loads(row["items"])],
                row["first_divergence"],
                row["path"],
                row["encoded_segments"],
                row["segments"],
                None if row["metadata"] is None else json.loads(row["metadata"]),
            )
        )
    return results, bad


def summarize_table(
    table: Any,
    *,
    family: str,
    mode: str = "fast",
    fast_path: str = "on",
    metric_version: str = "v1",
    encoder: str = "not recorded",
) -> Summary:
    """`tito_fast.score.summarize` over a table of `score_batch` outputs
    (`encoder`: the scorer's `encoder`, for the report)."""
    results, bad = results_from_table(table)
    return summarize(
        results, bad, family=family, mode=mode, fast_path=fast_path, metric_version=metric_version, encoder=encoder
    )



def __getattr__(name: str) -> Any:
    # `from tito_fast.ray import Scorer` named the Ray Data class before it became BatchScorer
    if name == "Scorer":
        return BatchScorer
    raise AttributeError(name)
