"""Writing an assembly out: chains as Parquet (list columns) or JSONL, and an HTML report."""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from tito_fast import _deps
from tito_fast.chains.core import KIND_LEGEND, KINDS, NO_TOKENIZER_NOTE, Assembly
from tito_fast.score.outputs import Output


def write_chains(assembly: Assembly, path: str | Path, arg: str | None = None, *, packed: bool = False) -> None:
    """Every chain as one row: `session_id`, `chain`, `open`, `parent` (the
    chain it branched off, null for a root), `shared` (leading ids shared
    with it), `ids` (uint32), `loss_mask` (uint8), `logprobs` (float32, null
    where not sampled) and `call_index` (int64) per id; `.parquet` or
    `.jsonl` by the file name. JSONL is strict JSON: a logprob is a finite
    number or null (a non-finite one, which no reader lets in, is refused:
    ValueError). `packed` (Parquet only): the packed form
    (`PackedChains.table`: each chain from `shared` on, a shared prefix
    stored once). Written whole or not at all
    (`tito_fast.score.outputs.Output`; `arg` names the option in its errors)."""
    p = Path(path)
    if p.suffix not in (".jsonl", ".parquet"):
        raise ValueError(f"{path}: name the chains file .parquet or .jsonl")
    if p.suffix == ".jsonl":
        if packed:
            raise ValueError(f"{path}: the packed form is written as Parquet: name the chains file .parquet")
        chains = assembly.chains()
        for c in chains:  # only hand-made `Call`s get here with one: every reader refuses a non-finite logprob
            if np.isinf(c.logprobs).any():
                at = int(np.flatnonzero(np.isinf(c.logprobs))[0])
                raise ValueError(f"session {c.session_id!r} chain {c.index}: logprob {c.logprobs[at]} at id {at} is not finite (not valid JSON)")
        with Output(p, arg) as out:
            f = out.open("w", encoding="utf-8")
            for c in chains:
                f.write(json.dumps(c.to_dict(), ensure_ascii=False, allow_nan=False) + "\n")
        return
    if p.suffix != ".parquet":
        raise ValueError(f"{path}: name the chains file .parquet or .jsonl")
    pq = _deps.parquet()
    table = assembly.packed().table() if packed else chains_table(assembly)
    with Output(p, arg) as out:
        pq.write_table(table, out.sink())


def chains_table(assembly: Assembly) -> Any:
    """The chains as a pyarrow Table, one row per chain (the columns of `write_chains`)."""
    pa = _deps.pyarrow()

    chains = assembly.chains()
    lengths = np.fromiter((len(c) for c in chains), dtype=np.int64, count=len(chains))
    big = int(lengths.sum()) >= 2**31
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64 if big else np.int32))
    list_of = pa.LargeListArray if big else pa.ListArray

    def column(values: list[np.ndarray], dtype: Any, mask_nan: bool = False) -> Any:
        flat = np.concatenate(values).astype(dtype, copy=False) if values else np.zeros(0, dtype=dtype)
        arr = pa.array(flat, mask=np.isnan(flat) if mask_nan else None)
        return list_of.from_arrays(offsets, arr)

    return pa.table(
        {
            "session_id": pa.array([c.session_id for c in chains], type=pa.string()),
            "chain": pa.array([c.index for c in chains], type=pa.int32()),
            "open": pa.array([c.open for c in chains], type=pa.bool_()),
            "parent": pa.array([c.parent for c in chains], type=pa.int32()),
            "shared": pa.array([c.shared for c in chains], type=pa.int64()),
            "ids": column([c.ids for c in chains], np.uint32),
            "loss_mask": column([c.loss_mask for c in chains], np.uint8),
            "logprobs": column([c.logprobs for c in chains], np.float32, mask_nan=True),
            "call_index": column([c.call_index for c in chains], np.int64),
        }
    )


def forest_text(assembly: Assembly, session_id: str) -> str:
    """Which calls form which chain of a session, as text: a line per chain
    (its calls at their places, `.` where another chain has the call, its
    parent and shared ids, its ids and sampled ids), then the session's
    events. The picture in docs/assemble.md is this, for the example capture.

    Example:
        >>> from tito_fast import assemble
        >>> a = assemble([{"session_id": "s", "prompt_ids": [1, 2], "completion_ids": [3]},
        ...               {"session_id": "s", "prompt_ids": [1, 2], "completion_ids": [4]}])
        >>> print(forest_text(a, "s"))
        s  chain 0  calls 0 .  root                   3 ids, 1 sampled
           chain 1  calls . 1  parent 0, 2 shared ids 3 ids, 1 sampled
           events: 1 rollback
    """
    chains = assembly.sessions[session_id]
    events = [e for e in assembly.events if e.session_id == session_id]
    members = [sorted(set(c.span_call.tolist())) for c in chains]
    calls = sorted({k for m in members for k in m} | {e.call_index for e in events})
    width = max((len(str(k)) for k in calls), default=1)
    grid = [" ".join(str(k).rjust(width) if k in set(m) else ".".rjust(width) for k in calls) for m in members]
    trees = ["root" if c.parent is None else f"parent {c.parent}, {c.shared:,} shared ids" for c in chains]
    tree_w = max(map(len, trees), default=4)
    pad = " " * len(session_id)
    lines = [
        f"{session_id if i == 0 else pad}  chain {c.index}  calls {grid[i]}  {trees[i].ljust(tree_w)} {len(c):,} ids, {c.sampled:,} sampled"
        for i, c in enumerate(chains)
    ]
    lines.append(f"{pad}  events: " + (", ".join(f"{e.call_index} {e.kind}" for e in events) or "none"))
    return "\n".join(lines)


def summary_json(assembly: Assembly, *, events: bool = True) -> dict[str, Any]:
    """The summary, the events and the bad records as JSON-ready values."""
    out: dict[str, Any] = {"summary": assembly.summary.to_dict()}
    if events:
        out["events"] = [e.to_dict() for e in assembly.events]
    out["bad_records"] = [b.to_dict() for b in assembly.bad]
    return out


def html_report(assembly: Assembly, *, title: str = "tito-fast assemble", source: str = "", tokenizer: bool = True) -> str:
    """A self-contained HTML page: a plain-words verdict, the summary, chains
    per session, where forks happen (by cause, and by call), the share of
    sampled ids delivered, the events, the forests (`forest_text` of the
    sessions with more than one chain) and a legend of the event kinds.
    `tokenizer`: whether the assembly had one (else a note says what that changes)."""
    from tito_fast.score.report import CSS, bar_chart, column_chart

    e = html.escape
    s = assembly.summary
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title><style>{CSS}</style></head><body>"]
    out.append(f"<h1>{e(title)}</h1><div class='meta'>{e(source)}</div>")
    out.append(f"<p class='verdict'>{e(s.verdict())}</p>")
    if not tokenizer:
        out.append(f"<p class='meta'>{e(NO_TOKENIZER_NOTE)}</p>")
    out.append("<h2>Summary</h2><table>")
    for line in s.table().splitlines():
        k, _, v = line.partition("  ")
        out.append(f"<tr><th>{e(k.strip())}</th><td>{e(v.strip())}</td></tr>")
    out.append("</table><h2>Plots</h2><div class='plots'>")
    per = sorted(s.chains_per_session.items())
    out.append(column_chart("sessions by number of chains", [str(k) for k, _ in per], [float(v) for _, v in per], percent=False, xlabel="chains in the session"))
    share = [("delivered (loss 1)", s.delivered_ids)] + [(f"masked: {k}", v) for k, v in s.masked_by_cause.items()]
    share += [(f"dropped: {k}", v) for k, v in s.dropped_by_cause.items()]
    total = max(s.sampled_ids, 1)
    out.append(bar_chart("where the sampled ids went", [k for k, _ in share], [v / total for _, v in share]))
    kinds = [k for k in KINDS if s.events_by_kind.get(k)]
    out.append(bar_chart("events by kind", kinds, [float(s.events_by_kind[k]) for k in kinds], percent=False))
    at_call = Counter(e.call_index for e in assembly.events if e.policy == "fork")
    if at_call:
        top = max(at_call)
        xs = list(range(top + 1))
        out.append(column_chart("forks by call index", [str(x) for x in xs], [float(at_call.get(x, 0)) for x in xs], percent=False, xlabel="call_index"))
    out.append("</div>")
    shown = assembly.events[:200]
    out.append(f"<h2>Events ({len(assembly.events):,}{', the first 200' if len(assembly.events) > 200 else ''})</h2>")
    out.append("<table><tr><th>session</th><th>call</th><th>kind</th><th>policy</th><th>chain → chain</th><th>position</th>"
               "<th>message</th><th>diagnosis</th><th>removed / masked / dropped</th></tr>")  # fmt: skip
    for ev in shown:
        where = "" if ev.message_index is None else f"{ev.message_index} ({ev.role})"
        out.append(
            f"<tr><td>{e(ev.session_id)}</td><td>{ev.call_index}</td><td>{e(ev.kind)}</td><td>{e(ev.policy)}</td>"
            f"<td>{ev.chain} → {ev.to_chain}</td><td>{ev.position:,}</td><td>{e(where)}</td><td>{e(ev.diagnosis or '')}</td>"
            f"<td>{ev.removed} / {ev.masked} / {ev.dropped}</td></tr>"
        )
    out.append("</table>")
    forests = [sid for sid, cs in assembly.sessions.items() if len(cs) > 1]
    if forests:
        out.append(f"<h2>Forests ({len(forests):,} sessions with more than one chain{', the first 50' if len(forests) > 50 else ''})</h2>")
        out.append("<p class='meta'>Which calls form which chain: a chain's calls at their places (. where another chain has the call), "
                   "the chain it branched off and the ids it shares with it.</p>")  # fmt: skip
        out.append("<pre>" + e("\n".join(forest_text(assembly, sid) for sid in forests[:50])) + "</pre>")
    out.append("<h2>Event kinds</h2><table>")
    for kind in KINDS:
        out.append(f"<tr><th>{e(kind)}</th><td>{e(KIND_LEGEND[kind])}</td></tr>")
    out.append("</table>")
    if assembly.bad:
        out.append(f"<h2>Bad records ({len(assembly.bad):,})</h2><table><tr><th>record</th><th>session</th><th>reason</th></tr>")
        for b in assembly.bad[:200]:
            out.append(f"<tr><td>{e(b.source)}</td><td>{e(str(b.session_id))}</td><td>{e(b.reason)}</td></tr>")
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out)
