"""Readable results of `tito-fast score`: a terminal table, Markdown, a self-contained
HTML report with plots (inline SVG, no scripts, no network), and coloured
side-by-side diffs for `tito-fast diff`.

Example:
    >>> from tito_fast.score.report import bar_chart
    >>> bar_chart("rates", ["a", "b"], [0.5, 0.25]).startswith("<svg")
    True
"""

from __future__ import annotations

import difflib
import html
import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from tito_fast._core import trim_trailing
from tito_fast.compare.alignment import MismatchType
from tito_fast.compare.diagnosis import sequence_opcodes
from tito_fast.score.scorer import SessionResult
from tito_fast.score.summary import MAX_NAMED, MISMATCH_TYPES, RETOKENIZATION_ONLY, STRICT_TYPES, Summary

CONTEXT = 160  # characters of unchanged text kept around a difference


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def summary_rows(s: Summary) -> list[tuple[str, str]]:
    """(name, value) rows of the summary, metrics first."""
    rows = [(k, _pct(v)) for k, v in s.metrics.items()]
    rows += [
        ("sessions scored", f"{s.sessions:,}"),
        ("bad records", f"{s.bad_records:,}"),
        ("turns", f"{s.turns:,}"),
        ("per-turn mismatch rate", _pct(s.per_turn_rate)),
        ("first divergence (median id)", "-" if s.first_divergence_median is None else f"{s.first_divergence_median:,.0f}"),
        ("differences by role", ", ".join(f"{k} {v}" for k, v in s.by_role.items()) or "-"),
        ("differences by kind", ", ".join(f"{k} {v}" for k, v in s.by_kind.items()) or "-"),
        ("chat template", s.template),
        ("fast path", s.fast_path),
        ("encoder", s.encoder),
        ("renderer", s.renderer),
    ]
    if s.encoded_segment_share is not None:
        rows.append(("segments encoded", _pct(s.encoded_segment_share)))
    if not s.complete:
        rows.insert(0, ("INCOMPLETE", "the run stopped early; these figures cover only what came before"))
    return rows


def text_table(s: Summary, extra: list[tuple[str, str]] | None = None, *, ci: bool = False) -> str:
    """The verdict, then the summary as an aligned two-column table (with `extra` rows at the end)."""
    rows = summary_rows(s) + (extra or [])
    width = max(len(k) for k, _ in rows)
    head = "".join(line + "\n" for line in verdict(s, ci=ci)) + "\n"
    return head + "".join(f"{k:<{width}}  {v}\n" for k, v in rows)


#: What usually causes each kind of difference, and what to do about it.
KIND_NOTES: dict[str, tuple[str, str]] = {
    "retokenization": (
        "the same text was tokenized into other ids (the engine's ids were decoded and re-encoded somewhere)",
        "keep the engine's ids end to end (TITO); never rebuild a turn's ids from its text",
    ),
    "whitespace_only": (
        "the texts differ only in whitespace (a template or parser that strips or adds newlines or spaces)",
        "render with the template the engine used; check content stripping in the tool or reasoning parser",
    ),
    "splice_seam": (
        "a few ids at a turn boundary: how turns were joined (a missing or extra newline or end token)",
        "check the family's merge rule (--family) and that completions keep their stop token",
    ),
    "content": (
        "the text itself differs: the messages do not say what the engine saw (a parser, a rewritten history, another template)",
        "compare the worst sessions below; check the chat template and the reasoning and tool-call parsers",
    ),
}


def _sessions_in(s: Summary, category: str) -> int:
    return int(s.named_sessions.get(category, {}).get("sessions", 0))


def verdict(s: Summary, *, ci: bool = False, named: str = "the HTML and Markdown reports (--report, --markdown)") -> list[str]:
    """The run's outcome in plain words: how many sessions differ (for the
    reference, and only by retokenization), the differences by kind and role
    with the sessions that hold them, what usually causes each kind and what
    to do; the `--ci` outcome; `named`: where the sessions are named."""
    prefix = f"tito_session_mismatch_rate/{s.metric_version}"
    lines: list[str] = []
    if not s.complete:
        lines.append("INCOMPLETE: the run stopped early; the figures cover only the records before it.")
    if not s.sessions:
        lines.append("No session was scored." + (f" {s.bad_records:,} bad record(s)." if s.bad_records else ""))
        return lines
    differ = round(s.metrics.get(prefix, 0.0) * s.sessions)
    only = _sessions_in(s, RETOKENIZATION_ONLY)
    if differ:
        lines.append(
            f"{differ:,} of {s.sessions:,} sessions ({_pct(differ / s.sessions)}) differ from a fresh render of their messages "
            f"(the reference's mismatch, counted in {prefix})."
        )
    elif only:
        lines.append(f"No session has a reference mismatch ({prefix} is 0), yet {only:,} differ by their ids (below).")
    else:
        lines.append(f"All {s.sessions:,} sessions match a fresh render of their messages (no reference mismatch).")
    if only:
        lines.append(
            f"{only:,} {'more ' if differ else ''}session(s) ({_pct(only / s.sessions)}) differ only by retokenization: same text, "
            "other ids. The reference reports nothing for them and counts them as matching; tito_fast's diagnosis finds them."
        )
    if s.mode == "fast":
        lines.append("Mode fast: retokenization not checked (--mode full checks it).")
    if s.by_kind:
        lines.append(
            "Differences by kind (a difference is one differing stretch of segments, so a session may hold several; "
            "sessions: how many hold one):"
        )
    for kind, n in s.by_kind.items():
        cause, action = KIND_NOTES.get(kind, ("", ""))
        unseen = ", none reported by the reference" if kind == "retokenization" else ""
        line = f"- {kind}: {n:,} difference(s) in {_sessions_in(s, f'kind:{kind}'):,} session(s){unseen}."
        lines.append(line + (f" Usually {cause}. What to do: {action}." if cause else ""))
    if s.by_role:
        lines.append(
            "Reported differences by the role of their message: "
            + ", ".join(f"{k} {v:,} in {_sessions_in(s, f'role:{k}'):,} session(s)" for k, v in s.by_role.items())
            + "."
        )
    if s.ci_failures:
        what = "; ".join(s.ci_failures)
        lines.append(f"--ci fails: {what}." if ci else f"With --ci this run would fail: {what}.")
    elif ci:
        lines.append("--ci passes: no strict mismatch type (special_token_count, special_token_type, non_assistant_text).")
    if s.named_sessions:
        lines.append(f"The sessions of every count above are named in {named}, the first {MAX_NAMED} of each.")
    if s.bad_records:
        lines.append(f"{s.bad_records:,} bad record(s) were not scored (listed below).")
    return lines


def category_note(s: Summary, category: str) -> tuple[str, str]:
    """(title, what it counts) of a category of `Summary.named_sessions`."""
    prefix = f"tito_session_mismatch_rate/{s.metric_version}"
    if category == "mismatch":
        return "reference mismatch", f"sessions the reference reports a mismatch for (of any type): the share is {prefix}"
    if category == RETOKENIZATION_ONLY:
        return "retokenization only", (
            "sessions whose only differences are retokenizations (same text, other ids): the reference reports nothing "
            "for them and counts them as matching; \"tito-fast diff DUMP --tokenizer TOK --session ID\" shows their ids"
        )
    what, _, name = category.partition(":")
    if what == "type":
        strict = " (a strict type: --ci requires it to be 0)" if name in STRICT_TYPES else ""
        return f"type {name}", f"sessions with a mismatch of type {name}: the share is {prefix}/{name}{strict}"
    if what == "kind":
        unseen = "; the reference reports none of them" if name == "retokenization" else ""
        return f"kind {name}", f"sessions holding a difference of kind {name}{unseen}"
    if what == "role":
        return f"role {name}", f"sessions holding a reported difference in a message of role {name}"
    return category, ""


def _visible(text: str) -> str:
    """Line breaks and tabs marked (↵, →), for unchanged text."""
    return text.replace("\n", "↵\n").replace("\t", "→")


def visible_whitespace(text: str) -> str:
    r"""Every whitespace character marked, for differing text: space ·, tab →,
    newline ↵ (a line break follows), carriage return ␍, others as \uXXXX.

    Example:
        >>> visible_whitespace("a b\t")
        'a·b→'
    """
    out = []
    for c in text:
        if c == " ":
            out.append("·")
        elif c == "\t":
            out.append("→")
        elif c == "\n":
            out.append("↵\n")
        elif c == "\r":
            out.append("␍")
        elif c.isspace():
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


def _clip(text: str, lo: int, hi: int) -> tuple[str, str, str]:
    """(before, middle, after) around [lo, hi), unchanged text clipped to CONTEXT chars."""
    before, middle, after = text[:lo], text[lo:hi], text[hi:]
    if len(before) > CONTEXT:
        before = "…" + before[-CONTEXT:]
    if len(after) > CONTEXT:
        after = after[:CONTEXT] + "…"
    return before, middle, after


def _diff_spans(a: str, b: str) -> tuple[list[tuple[str, bool]], list[tuple[str, bool]]]:
    """Both texts as (piece, differs) runs, by a character diff, unchanged runs clipped."""
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    left: list[tuple[str, bool]] = []
    right: list[tuple[str, bool]] = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            piece = a[i1:i2]
            if len(piece) > 2 * CONTEXT:
                piece = piece[:CONTEXT] + " … " + piece[-CONTEXT:]
            left.append((piece, False))
            right.append((piece, False))
        else:
            left.append((a[i1:i2], True))
            right.append((b[j1:j2], True))
    return left, right


def _context(text: str, before: bool) -> str:
    if len(text) > CONTEXT // 2:
        return "…" + text[-CONTEXT // 2 :] if before else text[: CONTEXT // 2] + "…"
    return text


def _html_runs(runs: list[tuple[str, bool]], cls: str) -> str:
    return "".join(
        (f'<span class="{cls}">{html.escape(visible_whitespace(t)) or "∅"}</span>' if d else html.escape(_visible(t)))
        for t, d in runs
        if t or d
    )


# -- plots ----------------------------------------------------------------------


def bar_chart(title: str, labels: list[str], values: list[float], *, percent: bool = True, width: int = 560) -> str:
    """A horizontal bar chart as inline SVG."""
    row, left = 22, 190
    height = 30 + row * max(len(labels), 1)
    top = max(values) if values and max(values) > 0 else 1.0
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{html.escape(title)}">',
        f'<text x="0" y="16" class="t">{html.escape(title)}</text>',
    ]
    if not labels:
        parts.append('<text x="0" y="40" class="l">(nothing to show)</text>')
    for i, (lab, v) in enumerate(zip(labels, values)):
        y = 28 + i * row
        w = (width - left - 70) * (v / top)
        val = _pct(v) if percent else f"{v:,.0f}"
        parts.append(f'<text x="{left - 6}" y="{y + 14}" class="l" text-anchor="end">{html.escape(lab)}</text>')
        parts.append(f'<rect x="{left}" y="{y + 2}" width="{max(w, 1):.1f}" height="{row - 6}" class="b"/>')
        parts.append(f'<text x="{left + w + 6:.1f}" y="{y + 14}" class="v">{val}</text>')
    parts.append("</svg>")
    return "".join(parts)


def column_chart(
    title: str,
    xs: list[str],
    values: list[float],
    *,
    percent: bool,
    xlabel: str,
    width: int = 560,
    counts: list[int] | None = None,
) -> str:
    """Vertical bars (a histogram or a per-index rate) as inline SVG; `counts`:
    how many sessions stand behind each bar (shown on it, and in its tooltip)."""
    height, bottom, left = 220, 40, 50
    plot_w, plot_h = width - left - 10, height - bottom - 30
    top = max(values) if values and max(values) > 0 else 1.0
    n = max(len(values), 1)
    bw = plot_w / n
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{html.escape(title)}">',
        f'<text x="0" y="16" class="t">{html.escape(title)}</text>',
        f'<line x1="{left}" y1="{30 + plot_h}" x2="{left + plot_w}" y2="{30 + plot_h}" class="ax"/>',
        f'<text x="{left - 4}" y="36" class="l" text-anchor="end">{_pct(top) if percent else f"{top:,.0f}"}</text>',
        f'<text x="{left - 4}" y="{30 + plot_h}" class="l" text-anchor="end">0</text>',
        f'<text x="{left + plot_w / 2}" y="{height - 4}" class="l" text-anchor="middle">{html.escape(xlabel)}</text>',
    ]
    if not values:
        parts.append(f'<text x="{left + 10}" y="{30 + plot_h / 2}" class="l">(nothing to show)</text>')
    step = max(1, n // 8)
    for i, v in enumerate(values):
        h = plot_h * (v / top)
        x = left + i * bw
        tip = f"{xs[i]}: {_pct(v) if percent else f'{v:,.0f}'}" + (f" of {counts[i]:,} sessions" if counts else "")
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{30 + plot_h - h:.1f}" width="{max(bw - 2, 1):.1f}" height="{h:.1f}" class="b">'
            f"<title>{html.escape(tip)}</title></rect>"
        )
        if counts and (bw >= 18 or i % step == 0):
            parts.append(
                f'<text x="{x + bw / 2:.1f}" y="{30 + plot_h - h - 3:.1f}" class="n" text-anchor="middle">n={counts[i]:,}</text>'
            )
        if i % step == 0:
            parts.append(f'<text x="{x + bw / 2:.1f}" y="{30 + plot_h + 14}" class="l" text-anchor="middle">{html.escape(xs[i])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def plots(s: Summary) -> list[str]:
    """The report's plots: rates by type, by role, by kind, by turn; first divergences."""
    prefix = f"tito_session_mismatch_rate/{s.metric_version}"
    types = ["any", *MISMATCH_TYPES]
    type_rates = [s.metrics.get(prefix, 0.0)] + [s.metrics.get(f"{prefix}/{t}", 0.0) for t in MISMATCH_TYPES]
    turns = s.by_turn[:60]
    xs = [f"{b['start']:,}" for b in s.first_divergence_bins]
    hist = [float(b["sessions"]) for b in s.first_divergence_bins]
    return [
        bar_chart("Share of sessions with a mismatch, by type", types, type_rates),
        bar_chart("Reported differences by role", list(s.by_role), [float(v) for v in s.by_role.values()], percent=False),
        bar_chart("Differences by kind", list(s.by_kind), [float(v) for v in s.by_kind.values()], percent=False),
        column_chart(
            "Share of sessions with a mismatch in turn k",
            [str(t["turn"]) for t in turns],
            [t["rate"] for t in turns],
            percent=True,
            xlabel="turn index (n: sessions that reach the turn)",
            counts=[t["sessions"] for t in turns],
        ),
        column_chart("First divergence (id position), sessions per bin", xs, hist, percent=False, xlabel="id position"),
    ]


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1b1f24;max-width:1200px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
table{border-collapse:collapse} td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
.banner{background:#b42318;color:#fff;padding:10px 14px;font-weight:600;margin:10px 0}
.ok{background:#e7f6ec;padding:8px 12px}.warn{background:#fff4e5;padding:8px 12px}
.plots{display:flex;flex-wrap:wrap;gap:18px}.plots svg{background:#fafbfc;border:1px solid #e3e6ea;padding:6px}
.t{font:600 13px system-ui,sans-serif}.l{font:11px system-ui,sans-serif;fill:#444}.v{font:11px monospace;fill:#222}
.b{fill:#3b6fd8}.n{font:9px system-ui,sans-serif;fill:#666}.ax{stroke:#888}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:8px;margin:4px 0 12px}
.pair pre{white-space:pre-wrap;word-break:break-all;margin:0;padding:8px;background:#f6f8fa;border:1px solid #e3e6ea;font:12px/1.4 monospace;max-height:260px;overflow:auto}
.del{background:#ffc9c9;color:#7a0b0b}.ins{background:#c6f0c2;color:#0b5a12}
.meta{font:12px monospace;color:#555}\n.head div{font:600 12px system-ui,sans-serif;color:#333}.verdict p{margin:4px 0}
"""
#: The report pages' style sheet (shared with `tito-fast assemble --report`).
CSS = _CSS



def _item_label(it: Any) -> str:
    where = f"message {it.message_index}" if it.message_index is not None else "outside the messages"
    label = (
        f"{it.type or 'not reported (retokenization)'} · kind {it.kind} · role {it.role} · {where} · turn {it.turn} · "
        f"id {it.position} · segment {it.segment_index}"
    )
    marker = getattr(it, "marker_role", None)
    if marker and marker != it.role:
        label += f" · rendered in a {marker} block"
    return label + (f" · {it.detail}" if it.detail else "")


def _item_runs(it: Any) -> tuple[list[tuple[str, bool]], list[tuple[str, bool]]]:
    if it.type == MismatchType.SPECIAL_TOKEN_TYPE.value:  # one token for another: mark it whole
        left, right = [(it.expected_text, True)], [(it.actual_text, True)]
    else:
        left, right = _diff_spans(it.expected_text, it.actual_text)
    before, after = _context(it.before, True), _context(it.after, False)
    return [(before, False), *left, (after, False)], [(before, False), *right, (after, False)]


def _metadata_text(metadata: Any, limit: int = 600) -> str:
    text = json.dumps(metadata, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "…"


def _named(s: Summary) -> list[tuple[str, str, int, list[dict[str, str]], int]]:
    """(title, what it counts, sessions, the named ones, how many more) of each category the verdict counts."""
    out = []
    for category, entry in s.named_sessions.items():
        title, meaning = category_note(s, category)
        named = entry["named"]
        out.append((title, meaning, entry["sessions"], named, entry["sessions"] - len(named)))
    return out


_NAMED_INTRO = (
    "Every count of the verdict with its sessions, named by session id and record, with where the first such "
    f"difference is (message, turn, id position); the first {MAX_NAMED} of each are named, all are counted "
    "(--json and --out hold every session's result)."
)


def _html_named(s: Summary) -> list[str]:
    e = html.escape
    if not s.named_sessions:
        return []
    out = [f"<h2>Sessions by category</h2><p class='meta'>{e(_NAMED_INTRO)}</p>"]
    for title, meaning, n, named, more in _named(s):
        out.append(f"<h3>{e(title)} <span class='meta'>{n:,} session(s)</span></h3><p>{e(meaning)}.</p><ul>")
        for x in named:
            out.append(
                f"<li><b>{e(x['session_id'])}</b> <span class='meta'>{e(x['source'])}"
                + (f" · {e(x['where'])}" if x["where"] else "")
                + "</span></li>"
            )
        if more:
            out.append(f"<li class='meta'>… and {more:,} more</li>")
        out.append("</ul>")
    return out


def html_report(
    s: Summary, worst: list[SessionResult], *, title: str = "tito-fast score", source: str = "", ci: bool = False
) -> str:
    """A self-contained HTML page: the verdict, summary, plots and the worst sessions side by side."""
    e = html.escape
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title><style>{_CSS}</style></head><body>"]
    out.append(f"<h1>{e(title)}</h1><div class='meta'>{e(source)} · family {e(s.family)} · mode {e(s.mode)} · fast path {e(s.fast_path)}</div>")
    if not s.complete:
        reason = next((b["reason"] for b in s.errors if b["source"] == s.stopped_at), None)
        where = "on an interrupt" if s.stopped_at == "interrupted" else f"at {s.stopped_at}" + (f" ({reason})" if reason else "")
        out.append(
            f"<div class='banner'>INCOMPLETE: the run stopped {e(where)}; the figures below cover only the sessions before it.</div>"
        )
    if ci and s.ci_failures:
        out.append(f"<div class='banner'>--ci fails: {e('; '.join(s.ci_failures))}</div>")
    out.append("<h2>Verdict</h2><div class='verdict'>")
    lines = verdict(s, ci=ci, named="Sessions by category below")
    out.extend(f"<p>{e(line)}</p>" for line in lines if not line.startswith("INCOMPLETE"))
    out.append("</div><h2>Summary</h2><table>")
    for k, v in summary_rows(s):
        out.append(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>")
    out.append("</table><h2>Plots</h2><div class='plots'>")
    out.extend(plots(s))
    out.append("</div>")
    out.extend(_html_named(s))
    out.append(f"<h2>Worst sessions ({len(worst)})</h2>")
    if not worst:
        out.append("<p>No session has a reported mismatch.</p>")
    for r in worst:
        out.append(
            f"<h3>{e(r.session_id)} <span class='meta'>{e(r.source)} · {r.turns} turns · {r.num_ids:,} ids · "
            f"{len(r.mismatches)} mismatch(es) · first divergence at id {r.first_divergence}</span></h3>"
        )
        if r.metadata is not None:
            out.append(f"<div class='meta'>metadata: {e(_metadata_text(r.metadata))}</div>")
        out.append("<div class='pair head'><div>fresh render</div><div>session ids</div></div>")
        for it in r.items[:12]:
            left, right = _item_runs(it)
            out.append(f"<div class='meta'>{e(_item_label(it))}</div><div class='pair'>")
            out.append(f"<pre title='fresh render'>{_html_runs(left, 'del')}</pre>")
            out.append(f"<pre title='session ids'>{_html_runs(right, 'ins')}</pre></div>")
        if len(r.items) > 12:
            out.append(f"<p class='meta'>… {len(r.items) - 12} more</p>")
    if s.errors:
        more = f", the first {len(s.errors):,} listed" if s.bad_records > len(s.errors) else ""
        out.append(f"<h2>Bad records ({s.bad_records:,}{more})</h2><table><tr><th>record</th><th>session</th><th>reason</th></tr>")
        for b in s.errors:
            out.append(f"<tr><td>{e(str(b['source']))}</td><td>{e(str(b['session_id']))}</td><td>{e(b['reason'])}</td></tr>")
        out.append("</table>")
        if s.bad_records > len(s.errors):
            out.append(f"<p class='meta'>… and {s.bad_records - len(s.errors):,} more bad record(s), counted but not listed</p>")
    out.append(
        "<p class='meta'>Left: the fresh chat-template render of the record's messages. Right: the session's ids. "
        "Highlighted: what differs (∅: nothing on this side); in it · is a space, → a tab, ↵ a newline. "
        "The text around each difference is the session's.</p>"
    )
    out.append("</body></html>")
    return "\n".join(out)


_MD_ESCAPE = re.compile(r"[\\`*\[\]<&~]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def _md_text(text: str, *, cell: bool = False) -> str:
    """Text as Markdown prose: backslashes before what Markdown would read
    (emphasis, code, links, HTML, entities; `_` only where it could start or
    end emphasis), pipes too in a table cell, line breaks as spaces. No HTML
    entities, so the raw text stays readable.

    Example:
        >>> _md_text("a_b *c* <d> | e", cell=True)
        'a_b \\\\*c\\\\* \\\\<d> \\\\| e'
    """
    text = _MD_ESCAPE.sub(lambda m: "\\" + m.group(0), text.replace("\r", " ").replace("\n", " "))
    return text.replace("|", "\\|") if cell else text


def md_code(text: str, *, cell: bool = False) -> str:
    """`text` as a Markdown code span: fenced with one backtick more than its
    longest run of them, padded with a space where the text starts or ends with
    a backtick or starts and ends with a space (the parser strips one there),
    pipes escaped in a table cell (GitHub reads `\\|` there as a pipe, even in
    code), line breaks as spaces; ∅ for no text.

    Example:
        >>> md_code("<|im_end|>")
        '`<|im_end|>`'
        >>> md_code("a ``b`` c")
        '```a ``b`` c```'
    """
    text = text.replace("\r", " ").replace("\n", " ")
    if not text:
        return "∅"
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    both_spaces = text[0] == text[-1] == " " and text.strip(" ")
    pad = " " if "`" in (text[0], text[-1]) or both_spaces else ""
    if cell:
        text = text.replace("|", "\\|")
    return f"{fence}{pad}{text}{pad}{fence}"


def _md_runs(runs: list[tuple[str, bool]]) -> str:
    """Runs as Markdown: text in code spans, differing text in bold brackets
    (whitespace visible, ∅ for nothing), so both read the same raw or rendered."""
    merged: list[tuple[str, bool]] = []
    for t, d in runs:
        if merged and merged[-1][1] == d:
            merged[-1] = (merged[-1][0] + t, d)
        elif t or d:
            merged.append((t, d))
    parts = []
    for t, d in merged:
        if d:
            parts.append("**[" + md_code(visible_whitespace(t).replace("\n", "")) + "]**")
        elif t:
            parts.append(md_code(_visible(t).replace("\n", "")))
    return "".join(parts)


def _md_lines(lines: list[str]) -> list[str]:
    """Verdict lines as Markdown paragraphs, "- " lines as one list."""
    out: list[str] = []
    for line in lines:
        item = line.startswith("- ")
        if out and not (item and out[-1].startswith("- ")):
            out.append("")
        out.append("- " + _md_text(line[2:]) if item else _md_text(line))
    return out


def markdown_report(
    s: Summary, worst: list[SessionResult], *, title: str = "tito-fast score", ci: bool = False
) -> str:
    """The verdict, summary, breakdowns, the sessions of each count and the
    worst sessions as Markdown that reads as plain text too: record texts,
    special tokens, ids and names in code spans, no HTML entities."""
    lines = [f"# {_md_text(title)}", ""]
    if not s.complete:
        lines += ["**INCOMPLETE**: the run stopped early; the figures cover only what came before.", ""]
    said = [x for x in verdict(s, ci=ci, named="Sessions by category below") if not x.startswith("INCOMPLETE")]
    lines += ["## Verdict", "", *_md_lines(said), ""]
    lines += ["| metric | value |", "|---|---|"]
    lines += [f"| {_md_text(k, cell=True)} | {_md_text(v, cell=True)} |" for k, v in summary_rows(s)]
    lines += ["", "## Mismatch rate by turn", "", "| turn | sessions | with mismatch | rate |", "|---|---|---|---|"]
    lines += [f"| {t['turn']} | {t['sessions']} | {t['with_mismatch']} | {_pct(t['rate'])} |" for t in s.by_turn if t["with_mismatch"]]
    if s.named_sessions:
        lines += ["", "## Sessions by category", "", _md_text(_NAMED_INTRO)]
        for heading, meaning, n, named, more in _named(s):
            lines += ["", f"### {_md_text(heading)} ({n:,} session(s))", "", _md_text(meaning) + ".", ""]
            for x in named:
                where = f": {_md_text(x['where'])}" if x["where"] else ""
                lines.append(f"- {md_code(x['session_id'])} ({md_code(x['source'])}){where}")
            if more:
                lines.append(f"- … and {more:,} more")
    lines += ["", "## Worst sessions", ""]
    for r in worst:
        lines.append(f"### {md_code(r.session_id)} ({md_code(r.source)}, first divergence at id {r.first_divergence})")
        if r.metadata is not None:
            lines += ["", f"metadata: {md_code(_metadata_text(r.metadata))}"]
        lines.append("")
        for it in r.items[:8]:
            left, right = _item_runs(it)
            lines.append(f"- {_md_text(_item_label(it))}")
            lines.append(f"  - fresh render: {_md_runs(left)}")
            lines.append(f"  - session ids: {_md_runs(right)}")
        if len(r.items) > 8:
            lines.append(f"- … and {len(r.items) - 8} more")
        lines.append("")
    if s.errors:
        lines += ["", f"## Bad records ({s.bad_records:,})", ""]
        lines += [f"- {md_code(str(b['source']))}: {_md_text(b['reason'])}" for b in s.errors]
        if s.bad_records > len(s.errors):
            lines.append(f"- … and {s.bad_records - len(s.errors):,} more, counted but not listed")
    return "\n".join(lines) + "\n"


# -- terminal diff --------------------------------------------------------------

RED, GREEN, DIM, BOLD, RESET = "\x1b[31;1m", "\x1b[32;1m", "\x1b[2m", "\x1b[1m", "\x1b[0m"


def _wrap_runs(runs: list[tuple[str, bool]], col: int, code: str, use_colour: bool) -> list[str]:
    """Runs cut into lines of `col` visible characters (padded), differing runs
    coloured (or bracketed without colour)."""
    chars: list[tuple[str, bool]] = []
    for t, d in runs:
        t = visible_whitespace(t).replace("\n", "") if d else t.replace("\n", "↵").replace("\t", "→")
        if d and not use_colour:
            t = "[" + t + "]"
        chars.extend((c, d) for c in t)
    lines = []
    for k in range(0, max(len(chars), 1), col):
        row = chars[k : k + col]
        out, on = [], False
        for c, d in row:
            if use_colour and d != on:
                out.append(code if d else RESET)
                on = d
            out.append(c)
        if on:
            out.append(RESET)
        lines.append("".join(out) + " " * (col - len(row)))
    return lines


def terminal_diff(
    pairs: Sequence[tuple[str, str, str] | tuple[str, str, str, bool]],
    *,
    colour: bool,
    width: int = 100,
    context: int = 1,
    labels: tuple[str, str] = ("fresh render", "session ids"),
    say_equal: bool = True,
) -> str:
    """Side-by-side segment pairs `(label, expected_text, actual_text[, differs])`:
    equal pairs are folded (keeping `context` around each difference),
    differences coloured (red: expected only, green: actual only; bracketed
    without colour). A pair differs where its texts do, or where `differs`
    says so (the same text in other ids). With `say_equal`, "no difference"
    ends the text when no pair differs."""
    col = max(20, (width - 3) // 2)
    flags = [bool(p[3]) if len(p) > 3 else p[1] != p[2] for p in pairs]
    diff_at = [i for i, f in enumerate(flags) if f]
    keep = {j for i in diff_at for j in range(i - context, i + context + 1)}
    lines = [f"{labels[0][:col]:<{col}} │ {labels[1]}", "─" * col + "─┼─" + "─" * col]
    folded = 0
    for i, pair in enumerate(pairs):
        label, a, b = str(pair[0]), str(pair[1]), str(pair[2])
        if i not in keep:
            folded += 1
            continue
        if folded:
            lines.append((DIM if colour else "") + f"… {folded} equal segment(s) …" + (RESET if colour else ""))
            folded = 0
        differs = flags[i]
        head = f"{label}" + ("  ≠" if differs else "") + ("  same text, other ids" if differs and a == b else "")
        lines.append((BOLD if colour and differs else "") + head + (RESET if colour and differs else ""))
        if not differs:
            left, right = [(a, False)], [(b, False)]
        elif "(special)" in label and a != b:  # one token for another: mark it whole
            left, right = [(a, True)], [(b, True)]
        else:
            left, right = _diff_spans(a, b)
        la, ra = _wrap_runs(left, col, RED, colour), _wrap_runs(right, col, GREEN, colour)
        for k in range(max(len(la), len(ra))):
            lines.append(f"{la[k] if k < len(la) else ' ' * col} │ {ra[k] if k < len(ra) else ''}".rstrip())
    if folded:
        lines.append((DIM if colour else "") + f"… {folded} equal segment(s) …" + (RESET if colour else ""))
    if not diff_at and say_equal:
        lines.append("no difference")
    return "\n".join(lines) + "\n"


def segment_pairs(cmp: Any, expected: Any, actual: Any) -> list[tuple[str, str, str, bool]]:
    """Segment-aligned `(label, expected_text, actual_text, differs)` of two id
    sequences: pair by pair when the structures match, else aligned by a
    segment diff (a missing segment shows as empty text on its side);
    `differs` is True where the ids differ, even when their texts are the same
    (a retokenization). The comparator's trailing trims apply first, as in
    the comparison."""
    trim = cmp.trim_ids()
    e_segs = cmp.segment_by_special_tokens(trim_trailing(expected, trim) if trim else expected)
    a_segs = cmp.segment_by_special_tokens(trim_trailing(actual, trim) if trim else actual)

    def text(seg: Any) -> str:
        return str(cmp.decode(seg.token_ids))

    def key(seg: Any) -> Any:
        return ("s", seg.token_ids[0]) if seg.is_special else ("c", tuple(seg.token_ids))

    e_keys, a_keys = [key(x) for x in e_segs], [key(x) for x in a_segs]
    pairs: list[tuple[str, str, str, bool]] = []
    for op, i1, i2, j1, j2 in sequence_opcodes(e_keys, a_keys):
        if op == "equal" or (op == "replace" and i2 - i1 == j2 - j1):
            for k in range(i2 - i1):
                e, a = e_segs[i1 + k], a_segs[j1 + k]
                kind = "special" if e.is_special else "content"
                label = f"segment {i1 + k} ({kind})" + (f" / actual {j1 + k}" if i1 != j1 else "")
                pairs.append((label, text(e), text(a), e_keys[i1 + k] != a_keys[j1 + k]))
            continue
        for k in range(i1, i2):
            pairs.append((f"segment {k} (expected only)", text(e_segs[k]), "", True))
        for k in range(j1, j2):
            pairs.append((f"actual segment {k} (actual only)", "", text(a_segs[k]), True))
    return pairs


#: `tito-fast diff`: equal ids shown on each side of a differing stretch of ids,
#: differing ids shown of a long stretch (the first and last half), stretches shown of one difference.
ID_CONTEXT, MAX_STRETCH_IDS, MAX_STRETCHES = 3, 16, 8


def _quote(raw: bytes) -> str:
    r"""Bytes as a double-quoted string: UTF-8 text, escapes for line breaks,
    tabs, quotes, other control or space characters and bytes that are not
    UTF-8 on their own (part of a character split between ids).

    Example:
        >>> _quote("naïve\n".encode()), _quote(b"\xc3")
        ('"naïve\\n"', '"\\xc3"')
    """
    out = []
    for c in raw.decode("utf-8", "surrogateescape"):
        o = ord(c)
        if 0xDC80 <= o <= 0xDCFF:
            out.append(f"\\x{o - 0xDC00:02x}")
        elif c in '"\\':
            out.append("\\" + c)
        elif c in "\n\t\r":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[c])
        elif o < 0x20 or o == 0x7F or (c.isspace() and c != " "):
            out.append(f"\\u{o:04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _id_bytes(cmp: Any, token_id: int) -> bytes:
    """What one id decodes to, as bytes (from the byte table when exact)."""
    vocab = cmp.vocab
    if vocab is not None and vocab.byte_exact and 0 <= token_id < vocab.size:
        return bytes(vocab.id_bytes(token_id))
    try:
        return str(cmp.decode([token_id])).encode("utf-8", "surrogatepass")
    except Exception:  # an id the tokenizer does not know (the diagnosis warns about it)
        return b"?"


def _ids_text(cmp: Any, ids: list[int]) -> str:
    """Ids as `id "text"` pairs, a long list cut in its middle."""
    def one(i: int) -> str:
        return f"{i} {_quote(_id_bytes(cmp, i))}"

    if len(ids) > MAX_STRETCH_IDS:
        half = MAX_STRETCH_IDS // 2
        return " ".join(map(one, ids[:half])) + f" … {len(ids) - 2 * half} ids … " + " ".join(map(one, ids[-half:]))
    return " ".join(map(one, ids))


def _decoded(cmp: Any, ids: list[int], *, clip: bool = True) -> str:
    """The text of `ids` (a long one cut in its middle, unless not `clip`)."""
    try:
        text = str(cmp.decode(ids)) if ids else ""
    except Exception:  # ids outside the vocabulary
        return "?"
    return text if not clip or len(text) <= 2 * CONTEXT else text[:CONTEXT] + " … " + text[-CONTEXT:]


def _stretches(e: list[int], a: list[int]) -> list[tuple[int, int, int, int]]:
    """Where two id lists differ, as `(i1, i2, j1, j2)`; stretches less than
    `2 * ID_CONTEXT + 1` equal ids apart are one."""
    out: list[tuple[int, int, int, int]] = []
    for op, i1, i2, j1, j2 in sequence_opcodes(e, a):
        if op == "equal":
            continue
        if out and i1 - out[-1][1] <= 2 * ID_CONTEXT:
            out[-1] = (out[-1][0], i2, out[-1][2], j2)
        else:
            out.append((i1, i2, j1, j2))
    return out


def _stretch_lines(
    cmp: Any, sides: tuple[Any, Any], spans: tuple[tuple[int, int], tuple[int, int]], stretch: tuple[int, int, int, int],
    labels: tuple[str, str], colour: bool,
) -> list[str]:  # fmt: skip
    """One differing stretch of ids: where, then each side's ids and decoded
    text with `ID_CONTEXT` ids around (the differing part bracketed, or coloured)."""
    i1, i2, j1, j2 = stretch
    bounds = [(spans[0][0] + i1, spans[0][0] + i2), (spans[1][0] + j1, spans[1][0] + j2)]
    n = [hi - lo for lo, hi in bounds]
    same = _decoded(cmp, _as_list(sides[0], *bounds[0]), clip=False) == _decoded(cmp, _as_list(sides[1], *bounds[1]), clip=False)
    out = [
        f"  at id {bounds[0][0]} of {labels[0]} ({n[0]} id{'s' * (n[0] != 1)}) and id {bounds[1][0]} of {labels[1]} "
        f"({n[1]} id{'s' * (n[1] != 1)})" + (": same text, other ids" if same else "")
    ]
    width = max(len(x) for x in labels)

    def quoted(part: list[int]) -> str:
        return _quote(_decoded(cmp, part).encode()) if part else ""

    for ids, (lo, hi), label, code in zip(sides, bounds, labels, (RED, GREEN)):
        before = _as_list(ids, max(0, lo - ID_CONTEXT), lo)
        middle = _as_list(ids, lo, hi)
        after = _as_list(ids, hi, min(len(ids), hi + ID_CONTEXT))
        open_, close = (code, RESET) if colour else ("[", "]")
        head = "… " if lo - len(before) > 0 else ""
        tail = " …" if hi + len(after) < len(ids) else ""
        shown = " ".join(x for x in (_ids_text(cmp, before), open_ + _ids_text(cmp, middle) + close, _ids_text(cmp, after)) if x)
        text = " ".join(x for x in (quoted(before), open_ + (quoted(middle) or "∅") + close, quoted(after)) if x)
        out.append(f"    {label:<{width}}  ids   {head}{shown}{tail}")
        out.append(f"    {'':<{width}}  text  {head}{text}{tail}")
    return out


def _as_list(ids: Any, lo: int, hi: int) -> list[int]:
    return [int(x) for x in ids[lo:hi]]


def ids_differ(cmp: Any, expected: Any, actual: Any) -> bool:
    """Whether two id sequences differ once the comparator's trailing trims apply (as in the comparison)."""
    trim = cmp.trim_ids()
    e, a = (trim_trailing(x, trim) if trim else x for x in (expected, actual))
    return len(e) != len(a) or bool(np.any(np.asarray(e, dtype=np.int64) != np.asarray(a, dtype=np.int64)))


def any_difference(cmp: Any, expected: Any, actual: Any, diagnosis: Any) -> bool:
    """Whether `tito-fast diff` has a difference to show (and exits 1): a
    diagnosed one (retokenizations included), a reference mismatch, or ids
    that differ after the trailing trims."""
    return bool(diagnosis.items or diagnosis.reference) or ids_differ(cmp, expected, actual)


def diff_text(
    cmp: Any,
    expected: Any,
    actual: Any,
    *,
    title: str,
    labels: tuple[str, str] = ("fresh render", "session ids"),
    colour: bool = False,
    width: int = 120,
    context: int = 1,
    diagnosis: Any = None,
) -> str:
    """`tito-fast diff`'s output: a title, what the comparison trimmed, the two
    sides by segment, then each difference (retokenizations included) with its
    kind, role and message and the differing ids of each side with their
    decoded text around them, the reference's mismatch list, and a last line
    that counts the differences ("no difference" only when the ids are equal
    after the trims). `diagnosis`: `cmp.diagnose(expected, actual)`, when made."""
    out = [title]
    trim = cmp.trim_ids()
    if trim:
        cut = [len(x) - len(trim_trailing(x, trim)) for x in (expected, actual)]
        if any(cut):
            out.append(
                f"trailing ids trimmed before comparing (as the reference does): {cut[0]} from {labels[0]}, "
                f"{cut[1]} from {labels[1]}"
            )
    text = terminal_diff(
        segment_pairs(cmp, expected, actual), colour=colour, width=width, context=context, labels=labels, say_equal=False
    )
    out.append(text.rstrip("\n"))
    if diagnosis is None:
        diagnosis = cmp.diagnose(expected, actual)
    sides = (expected, actual)
    for it in diagnosis.items:
        where = f"message {it.message_index}" if it.message_index is not None and it.message_index >= 0 else "outside the messages"
        out.append(
            f"difference at segment {it.segment_index}: {it.type or 'not reported (same text, other ids)'}, kind {it.kind}, "
            f"role {it.role}, {where}" + (f" ({it.detail})" if it.detail else "")
        )
        spans = (tuple(it.expected_span), tuple(it.actual_span))
        (es, ee), (as_, ae) = spans
        found = _stretches(_as_list(expected, es, ee), _as_list(actual, as_, ae)) or [(0, ee - es, 0, ae - as_)]
        for stretch in found[:MAX_STRETCHES]:
            out += _stretch_lines(cmp, sides, spans, stretch, labels, colour)
        if len(found) > MAX_STRETCHES:
            out.append(f"  … and {len(found) - MAX_STRETCHES} more differing stretch(es) of ids in this difference")
    differs = any_difference(cmp, expected, actual, diagnosis)
    if differs and not diagnosis.items:  # ids differ where the diagnosis names nothing: show them all the same
        e, a = ([int(v) for v in (trim_trailing(x, trim) if trim else x)] for x in sides)
        out.append("difference the diagnosis does not locate: the ids differ")
        spans = ((0, len(e)), (0, len(a)))
        found = _stretches(e, a)
        for stretch in found[:MAX_STRETCHES]:
            out += _stretch_lines(cmp, (e, a), spans, stretch, labels, colour)
    for w in diagnosis.warnings:
        out.append(f"warning: {w}")
    for m in diagnosis.reference:
        out.append(f"reference: {m.type.value} at segment {m.segment_index}")
    if not differs:
        out.append("no difference")
    else:
        n = len(diagnosis.items) or 1
        unseen = sum(1 for it in diagnosis.items if it.type is None)
        out.append(
            f"{n} difference(s): {n - unseen} reported by the reference, {unseen} not (same text, other ids)"
            if diagnosis.items
            else "the ids differ"
        )
    return "\n".join(out) + "\n"
