"""The packed form of an assembly: each chain's ids after the prefix it shares
with its parent, so a prefix shared by several chains (a sub-agent's branch
point, a retry) is stored once (prefix-shared or tree training)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tito_fast import _deps


class _HasChains(Protocol):
    """What `pack` reads of an `Assembly` (its chains, session by session)."""

    def chains(self) -> list[Any]: ...


@dataclass
class PackedChains:
    """Every chain of an assembly, each stored from `shared[i]` on.

    Chain `i` is its parent's first `shared[i]` ids (with loss 0 and NaN
    logprobs here: they are trained in the parent) followed by its own part,
    `ids[offsets[i]:offsets[i + 1]]` (and the same slice of `loss_mask` and
    `logprobs`). A parent always comes before its children. `span_*` are the
    chain's runs of one call's ids over the whole chain (as `Chain.span_start`
    and `Chain.span_call`).

    Example:
        >>> from tito_fast import assemble
        >>> a = assemble([{"session_id": "s", "prompt_ids": [1, 2], "completion_ids": [3]},
        ...               {"session_id": "s", "prompt_ids": [1, 2], "completion_ids": [4]}])
        >>> p = a.packed()
        >>> p.parent.tolist(), p.shared.tolist(), p.ids.tolist()
        ([-1, 0], [0, 2], [1, 2, 3, 4])
        >>> p.unpack(1)["ids"].tolist()
        [1, 2, 4]
    """

    session_id: list[str]
    chain: np.ndarray  # int32: the chain's index in its session
    parent: np.ndarray  # int64: the parent's row (-1: a root)
    shared: np.ndarray  # int64: leading ids taken from the parent
    offsets: np.ndarray  # int64: where each chain's own part starts in ids (one more: the end)
    ids: np.ndarray  # uint32
    loss_mask: np.ndarray  # uint8
    logprobs: np.ndarray  # float32
    span_offsets: np.ndarray  # int64
    span_start: np.ndarray  # int64
    span_call: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.session_id)

    def unpack(self, i: int) -> dict[str, np.ndarray]:
        """Chain `i` whole: `ids`, `loss_mask`, `logprobs` and `call_index`."""
        segments: list[tuple[int, int]] = []  # (row, ids of its own part), from the leaf up
        row, upto = i, -1
        while True:
            start = int(self.shared[row])
            n = start + int(self.offsets[row + 1] - self.offsets[row]) if upto < 0 else upto
            if n > start:
                segments.append((row, n - start))
            if start == 0 or int(self.parent[row]) < 0:
                break
            upto, row = min(n, start), int(self.parent[row])
        ids = np.concatenate([self.ids[int(self.offsets[r]) : int(self.offsets[r]) + k] for r, k in reversed(segments)] or [np.zeros(0, np.uint32)])
        n_shared = int(self.shared[i])
        own = slice(int(self.offsets[i]), int(self.offsets[i + 1]))
        loss = np.concatenate([np.zeros(n_shared, dtype=np.uint8), self.loss_mask[own]])
        lps = np.concatenate([np.full(n_shared, np.nan, dtype=np.float32), self.logprobs[own]])
        runs = slice(int(self.span_offsets[i]), int(self.span_offsets[i + 1]))
        starts, calls = self.span_start[runs], self.span_call[runs]
        call_index = np.repeat(calls, np.diff(np.append(starts, len(ids))))
        return {"ids": ids, "loss_mask": loss, "logprobs": lps, "call_index": call_index}

    def table(self) -> Any:
        """As a pyarrow Table, one row per chain: `session_id`, `chain`,
        `parent` (its row, null for a root), `shared`, the own part's `ids`,
        `loss_mask` and `logprobs` (null where not sampled), and the runs
        `span_start` / `span_call_index`."""
        pa = _deps.pyarrow()

        def lists(values: np.ndarray, offsets: np.ndarray, mask: np.ndarray | None = None) -> Any:
            big = len(values) >= 2**31
            off = pa.array(offsets.astype(np.int64 if big else np.int32))
            return (pa.LargeListArray if big else pa.ListArray).from_arrays(off, pa.array(values, mask=mask))

        parent = pa.array(self.parent, mask=self.parent < 0, type=pa.int64())
        return pa.table(
            {
                "session_id": pa.array(self.session_id, type=pa.string()),
                "chain": pa.array(self.chain, type=pa.int32()),
                "parent": parent,
                "shared": pa.array(self.shared, type=pa.int64()),
                "ids": lists(self.ids, self.offsets),
                "loss_mask": lists(self.loss_mask, self.offsets),
                "logprobs": lists(self.logprobs, self.offsets, np.isnan(self.logprobs)),
                "span_start": lists(self.span_start, self.span_offsets),
                "span_call_index": lists(self.span_call, self.span_offsets),
            }
        )


def pack(assembly: _HasChains) -> PackedChains:
    """The packed form of `assembly` (see `PackedChains`)."""
    chains = assembly.chains()
    row_of: dict[tuple[str, int], int] = {(c.session_id, c.index): r for r, c in enumerate(chains)}
    parent = np.asarray([-1 if c.parent is None else row_of[(c.session_id, c.parent)] for c in chains], dtype=np.int64)
    shared = np.asarray([c.shared for c in chains], dtype=np.int64)
    own = [slice(int(s), len(c)) for c, s in zip(chains, shared)]
    lengths = np.asarray([len(c) - int(s) for c, s in zip(chains, shared)], dtype=np.int64)
    spans = [len(c.span_start) for c in chains]

    def flat(name: str, dtype: Any) -> np.ndarray:
        parts = [getattr(c, name)[o] for c, o in zip(chains, own)]
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)

    return PackedChains(
        session_id=[c.session_id for c in chains],
        chain=np.asarray([c.index for c in chains], dtype=np.int32),
        parent=parent,
        shared=shared,
        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        ids=flat("ids", np.uint32),
        loss_mask=flat("loss_mask", np.uint8),
        logprobs=flat("logprobs", np.float32),
        span_offsets=np.concatenate([[0], np.cumsum(spans)]).astype(np.int64),
        span_start=np.concatenate([c.span_start for c in chains]).astype(np.int64) if chains else np.zeros(0, np.int64),
        span_call=np.concatenate([c.span_call for c in chains]).astype(np.int64) if chains else np.zeros(0, np.int64),
    )
