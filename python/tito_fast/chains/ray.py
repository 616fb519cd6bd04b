"""Assemble captured calls on Ray Data: `assemble_table(pyarrow.Table) -> pyarrow.Table`
and a callable class for `map_groups`.

Every call of a session must reach the same batch, so group by session:

Example:
    >>> import ray  # doctest: +SKIP
    >>> ds = ray.data.read_parquet("calls.parquet")  # doctest: +SKIP
    >>> chains = ds.groupby("session_id").map_groups(  # doctest: +SKIP
    ...     BatchAssembler, fn_constructor_kwargs={"tokenizer": "/models/qwen3", "family": "qwen3"},
    ...     batch_format="pyarrow", concurrency=4, num_cpus=1)
    >>> chains.write_parquet("chains/")  # doctest: +SKIP

The output rows are the chains (`session_id`, `chain`, `open`, `parent`,
`shared`, `ids`, `loss_mask`, `logprobs`, `call_index`, as `tito-fast
assemble --out`); a batch with a bad record raises `CallsError` (Ray reports
it with the row). `leaves` and `matcher` are `assemble`'s.
"""

from __future__ import annotations

from typing import Any

from tito_fast.chains.core import DEFAULT_REALIGN_WINDOW, assemble
from tito_fast.chains.output import chains_table


def assemble_table(
    table: Any,
    *,
    tokenizer: Any = None,
    family: str | None = None,
    policy: Any = None,
    realign_window: int = DEFAULT_REALIGN_WINDOW,
    threads: int | None = 1,
    leaves: str = "all",
    matcher: str | None = None,
) -> Any:
    """The chains of the calls in `table` (a pyarrow Table of capture records,
    every session's calls all in it), one output row per chain. The ids are
    read in place from the list columns (the columnar path of `assemble`)."""
    a = assemble(
        table, tokenizer=tokenizer, family=family, policy=policy, realign_window=realign_window, threads=threads,
        leaves=leaves, matcher=matcher,
    )  # fmt: skip
    return chains_table(a)


class BatchAssembler:
    """A Ray Data callable class: the tokenizer and family are loaded once per
    actor, then every group of calls is assembled (one thread each: Ray runs
    the actors in parallel)."""

    def __init__(self, tokenizer: str | None = None, family: str | None = None, policy: Any = None,
                 realign_window: int = DEFAULT_REALIGN_WINDOW, leaves: str = "all", matcher: str | None = None) -> None:  # fmt: skip
        from tito_fast.tokenizer.load import load_tokenizer

        self.tokenizer = load_tokenizer(tokenizer, snapshot=True) if tokenizer is not None else None
        self.family, self.policy, self.realign_window = family, policy, realign_window
        self.leaves, self.matcher = leaves, matcher

    def __call__(self, batch: Any) -> Any:
        return assemble_table(
            batch, tokenizer=self.tokenizer, family=self.family, policy=self.policy, realign_window=self.realign_window,
            leaves=self.leaves, matcher=self.matcher,
        )  # fmt: skip
