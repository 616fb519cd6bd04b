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

from typing import Any

from tito_fast import _deps
from tito_fast.errors import DumpError
from tito_fast.score.dump import BadRecord, batch_rows
from tito_fast.score.results import COLUMNS, from_row, row, schema
from tito_fast.score.run import build_scorer
from tito_fast.score.run import score_batch as run_batch
from tito_fast.score.scorer import Mode, SessionResult
from tito_fast.score.scorer import Scorer as SessionScorer
from tito_fast.score.summary import Summary, summarize


def score_batch(table: Any, scorer: SessionScorer, *, row_offset: int = 0, threads: int | None = 1) -> Any:
    """Score every row of `table` (a pyarrow Table in the dump layout); one output row per input row.

    Rows go through the scorer's native session check as the CLI's do (read,
    rendered, encoded and compared in Rust on `threads` threads; default 1,
    as a Ray worker holds one CPU; None: all cores), their ids read in place
    from the Arrow buffers. Bad rows are not raised: they come back with
    `ok=False` and the reason in `error`. A table without the required
    columns is a `DumpError` (one error, not one per row).
    """
    pa = _deps.pyarrow()

    missing = {"messages", "token_ids"} - set(table.column_names)
    if missing:
        raise DumpError(f"the table has no column(s) {sorted(missing)}; its columns are {sorted(table.column_names)}")
    # the dump's bound on a record, one owner: a row over it is a bad record, never turned into Python objects
    items = list(batch_rows(table, lambda i: f"row {row_offset + i}", row_offset))
    out: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    for result in run_batch(scorer, items, threads):
        r = row(result)
        for name in COLUMNS:
            out[name].append(r[name])
    return pa.Table.from_pydict(out, schema=schema())


class BatchScorer:
    """A Ray Data callable class: the tokenizer, family, byte table and comparator
    are built once per actor in `__init__`, then every batch is scored.

    Args:
        tokenizer: a tokenizer directory on every node (or `fixture:NAME`).
        family: a family name or a `FamilyConfig` dict.
        template: a chat template text replacing the tokenizer's.
        encoder_path: DeepSeek V3.2/V4's encoder module file (else found where users have it).
        trust_encoder: load an encoder file found in the tokenizer's folder (runs its code).
        mode: "full" (default) or "fast" (see `tito_fast.score`).
    """

    def __init__(
        self,
        tokenizer: str,
        family: Any = "default",
        template: str | None = None,
        mode: Mode = "full",
        encoder_path: str | None = None,
        trust_encoder: bool = False,
    ) -> None:
        self.scorer = build_scorer(tokenizer, family, template, mode, encoder_path, trust_encoder)

    def __call__(self, batch: Any) -> Any:
        return score_batch(batch, self.scorer)


def results_from_table(table: Any) -> tuple[list[SessionResult], list[BadRecord]]:
    """Rows of `score_batch` outputs back as results and bad records."""
    results: list[SessionResult] = []
    bad: list[BadRecord] = []
    for r in table.to_pylist():
        res = from_row(r)
        (bad if isinstance(res, BadRecord) else results).append(res)  # type: ignore[arg-type]
    return results, bad


def summarize_table(
    table: Any,
    *,
    family: str,
    mode: str = "full",
    fast_path: str = "off (mode full)",
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
