"""Exact attribution: a difference is named by the record message it was planted in.

On the real tokenizer and template of every fixture family, agent sessions
(system, user, assistant with reasoning, with one and with several tool
calls, tool results, assistant without reasoning, empty content, unicode)
are rendered and encoded by the family itself; the clean session must score
with no item. Then ONE fault is planted per session, in message i, for every
i and every fault kind:

- ``whitespace``: an extra space, a missing space or an extra newline inside
  a text of the message (its content, its reasoning), a space before it, a
  newline after it;
- ``tool_args``: the rendered arguments of one tool call with other spacing
  (compact JSON for the families that render JSON, a space before the value
  for those that render XML parameters);
- ``retokenization``: the first or the last id of a text of the message
  split into two ids whose bytes concatenate to it (same text, other ids);
- ``content``: a word changed (a word inserted into an empty content);
- ``boundary``: a special token of the message's wrapper (its opener, a tag
  inside it, its closer) replaced by another special token.

Text faults are edits of the render at a place inside message i's part of
it (its own texts, which are unique in the render, so where they are says
which message they are), then encoded; the other two edit the ids. Every
item the scorer reports (retokenizations, which the reference does not
report, included) must carry `message_index == i` and
`role == messages[i]["role"]`, with no tolerance: on the full path, on the
fast path, and through `run_score` on a JSONL dump of all of them (the
native session check where the family has one).

`tito-fast diff` names the same messages for a dump, and `assemble` gives
every id of a chain the message of its call it belongs to.
"""

from __future__ import annotations

import copy
import functools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tito_fast.chat.families import TitoTokenizer, get_tito_tokenizer
from tito_fast.cli.main import cli
from tito_fast.errors import AppendOnlyError, RenderError
from tito_fast.score.dump import Record
from tito_fast.score.run import run_score
from tito_fast.score.scorer import Scorer
from tito_fast.testing import fixtures

# fixture tokenizer -> family (the Makefile's VERIFY_PAIRS, one per fixture)
PAIRS = [
    ("qwen3", "qwen3"),
    ("qwen35", "qwen35"),
    ("qwen25", "qwen25"),  # a default system prompt the first message replaces
    ("glm47", "glm47"),
    ("glm51", "glm47"),  # GLM-5.1's stock template
    ("minimax_m27", "minimax_m27"),
    ("minimax_m3", "minimax_m27"),
    ("llama31", "llama3"),
    ("kimi_k2", "kimi25"),
    ("nemotron3", "nemotron3"),
    ("deepseek_v32", "deepseekv32"),
    ("deepseek_v4", "deepseekv4"),
]
KINDS = ("whitespace", "tool_args", "retokenization", "content", "boundary")

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "lines": {"type": "integer"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
]


def _call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}


# Every text is unique in its render (so its place says which message it is in).
AGENT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a careful coding agent."},
    {"role": "user", "content": "Read both notes, then summarise them."},
    {
        "role": "assistant",
        "content": "Reading both files now.",
        "reasoning_content": "Two reads are needed here.",
        "tool_calls": [
            _call(0, "read_file", {"path": "notes/alpha.md", "lines": 20}),
            _call(1, "read_file", {"path": "notes/beta.md", "lines": 30}),
        ],
    },
    {"role": "tool", "tool_call_id": "call_0", "content": "alpha holds the plan"},
    {"role": "tool", "tool_call_id": "call_1", "content": "beta holds the budget"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "One more read first.",
        "tool_calls": [_call(2, "read_file", {"path": "notes/gamma.md", "lines": 40})],
    },
    {"role": "tool", "tool_call_id": "call_2", "content": "gamma: café 你好 🙂 ok"},
    {"role": "assistant", "content": "The plan, the budget and a greeting."},  # no reasoning
    {"role": "user", "content": ""},
    {"role": "assistant", "content": "Nothing more to add here.", "reasoning_content": "The user sent nothing."},
]
CHAT: list[dict[str, Any]] = [  # no system message; unicode; a single call
    {"role": "user", "content": "Grüß dich, wie geht's? 你好 🙂"},
    {"role": "assistant", "content": "Fine, thanks for asking.", "reasoning_content": "Greet them back."},
    {"role": "user", "content": "What is the weather in Zürich today?"},
    {
        "role": "assistant",
        "content": "Checking the weather.",
        "reasoning_content": "Use the weather tool.",
        "tool_calls": [_call(3, "get_weather", {"city": "Zürich Altstadt"})],
    },
    {"role": "tool", "tool_call_id": "call_3", "content": "21 °C, clear sky"},
    {"role": "assistant", "content": "It is 21 °C and clear.", "reasoning_content": "Report the result."},
]


def _single_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The session with one call per assistant message (and one result each),
    for templates that render a single call only (Llama 3.1)."""
    out: list[dict[str, Any]] = []
    dropped: set[str] = set()
    for m in messages:
        if m.get("tool_calls") and len(m["tool_calls"]) > 1:
            dropped |= {c["id"] for c in m["tool_calls"][1:]}
            m = dict(m, tool_calls=m["tool_calls"][:1])
        if m.get("role") == "tool" and m.get("tool_call_id") in dropped:
            continue
        out.append(m)
    return out


@dataclass
class Fault:
    kind: str
    message: int
    what: str
    ids: list[int]


@dataclass
class Tally:
    planted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    right: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    wrong: list[str] = field(default_factory=list)
    #: `Scorer.diagnose` (what `tito-fast diff` shows for a dump): faults checked, and those it misplaced
    diff_checked: int = 0
    diff_wrong: list[str] = field(default_factory=list)


@functools.cache
def _scorer(fixture: str, family: str) -> Scorer:
    tok = fixtures.load_tokenizer(fixture)
    return Scorer(tito=get_tito_tokenizer(tok, family))


class Planter:
    """Plants faults into the render of one session, message by message."""

    def __init__(self, scorer: Scorer, messages: list[dict[str, Any]], seed: int) -> None:
        self.scorer = scorer
        self.tito: TitoTokenizer = scorer.tito
        self.messages = messages
        self.rng = random.Random(seed)
        self.text = self.render(messages)
        self.ids = self.tito.encode(self.text)
        vocab = scorer.cmp.vocab
        assert vocab is not None and vocab.byte_exact
        self.vocab = vocab
        self.by_bytes = {vocab.id_bytes(i): i for i in range(vocab.size) if i not in vocab.added_ids}
        raw = self.text.encode("utf-8")
        ends = np.cumsum([len(vocab.id_bytes(i)) for i in self.ids])
        assert int(ends[-1]) == len(raw)
        self.id_start = np.concatenate([[0], ends[:-1]])  # byte where each id starts
        self.id_end = ends
        # Char offset -> byte offset.
        self.byte_at = np.concatenate([[0], np.cumsum([len(c.encode("utf-8")) for c in self.text])])
        self.boundary = set(scorer.cmp.segmenter.boundary_ids)
        self.special = self.boundary | set(vocab.added_ids)
        tracker = scorer.cmp.role_tracker
        self.openers = {*tracker.fixed, *tracker.named}
        self.trim = scorer.cmp.trim_ids()
        self.starts = [self._prefix_start(k) for k in range(len(messages) + 1)]
        self.texts = [self._texts(i) for i in range(len(messages))]

    def render(self, messages: list[dict[str, Any]]) -> str:
        return self.tito.apply_chat_template(messages, add_generation_prompt=False, tools=TOOLS)

    def _prefix_start(self, k: int) -> int | None:
        """Where message k starts in the render (chars), when the render of
        messages[:k] is a prefix of the whole render; else None."""
        if k == len(self.messages):
            return len(self.text)
        try:
            part = self.render(self.messages[:k])
        except (RenderError, ValueError):
            return None
        return len(part) if self.text.startswith(part) else None

    def _texts(self, i: int) -> list[tuple[str, int, int]]:
        """(name, start, end) in chars of the texts of message i found in the render:
        its content, its reasoning, each call's rendered arguments."""
        m = self.messages[i]
        lo = max([s for s in self.starts[: i + 1] if s is not None], default=0)
        hi = min(s for s in self.starts[i + 1 :] if s is not None)
        out = []
        for name in ("reasoning_content", "content"):
            value = m.get(name)
            if value:
                at = self.text.find(value, lo, hi)
                if at >= 0:
                    out.append((name, at, at + len(value)))
        if not m.get("content"):  # empty: where a content would go
            empty = self._empty_content_at(i)
            if empty is not None and lo <= empty <= hi:
                out.append(("content", empty, empty))
        for j, call in enumerate(m.get("tool_calls") or []):
            args = call["function"]["arguments"]
            for sep in ((", ", ": "), (",", ":")):
                dumped = json.dumps(args, ensure_ascii=False, separators=sep)
                at = self.text.find(dumped, lo, hi)
                if at >= 0:
                    out.append((f"json{j}", at, at + len(dumped)))
                    break
            else:
                value = next(v for v in args.values() if isinstance(v, str))
                at = self.text.find(value, lo, hi)
                assert at >= 0, (i, value)
                out.append((f"arg{j}", at, at + len(value)))
        return sorted(out, key=lambda t: t[1])

    def _empty_content_at(self, i: int) -> int | None:
        """Where message i's (empty) content is rendered: where a render with a
        sentinel content departs from the whole render."""
        changed = [dict(m) for m in self.messages[: i + 1]]
        changed[i]["content"] = "QZXJ"
        try:
            r = self.render(changed)
        except (RenderError, ValueError):
            return None
        at = r.find("QZXJ")
        return at if at >= 0 and self.text.startswith(r[:at]) else None

    # -- faults ------------------------------------------------------------

    def _edit(self, kind: str, i: int, what: str, start: int, end: int, new: str) -> Fault:
        text = self.text[:start] + new + self.text[end:]
        return Fault(kind, i, what, self.tito.encode(text))

    def faults(self, i: int) -> list[Fault]:
        out: list[Fault] = []
        for name, s, e in self.texts[i]:
            if name.startswith(("json", "arg")):
                continue
            piece = self.text[s:e]
            spaces = [s + j for j, c in enumerate(piece) if c == " " and 0 < j < len(piece) - 1]
            if spaces:
                at = spaces[len(spaces) // 2]
                out.append(self._edit("whitespace", i, f"{name}: extra space", at, at, " "))
                out.append(self._edit("whitespace", i, f"{name}: missing space", at, at + 1, ""))
                out.append(self._edit("whitespace", i, f"{name}: extra newline", at, at, "\n"))
            else:
                out.append(self._edit("whitespace", i, f"{name}: extra space", s, s, " "))
            if e > s:  # at its edges, next to the wrapper
                out.append(self._edit("whitespace", i, f"{name}: leading space", s, s, " "))
                out.append(self._edit("whitespace", i, f"{name}: trailing newline", e, e, "\n"))
            words = [(s + j, s + j + len(w)) for j, w in _words(piece)]
            if words:
                ws, we = words[len(words) // 2]
                out.append(self._edit("content", i, f"{name}: changed word", ws, we, "zebra"))
            else:
                out.append(self._edit("content", i, f"{name}: word inserted", s, s, "zebra"))
        for name, s, e in self.texts[i]:
            piece = self.text[s:e]
            if name.startswith("json"):
                compact = json.dumps(json.loads(piece), ensure_ascii=False, separators=(",", ":"))
                spaced = json.dumps(json.loads(piece), ensure_ascii=False)
                out.append(self._edit("tool_args", i, f"{name}: other spacing", s, e, spaced if piece == compact else compact))
            elif name.startswith("arg"):
                out.append(self._edit("tool_args", i, f"{name}: space before the value", s, s, " "))
        out += self._retokenizations(i)
        out += self._swaps(i)
        return out

    def _id_range(self, start: int, end: int) -> range:
        """The ids lying wholly inside chars [start, end)."""
        b0, b1 = int(self.byte_at[start]), int(self.byte_at[end])
        first = int(np.searchsorted(self.id_start, b0, side="left"))
        last = int(np.searchsorted(self.id_end, b1, side="right"))
        return range(first, last)

    def _retokenizations(self, i: int) -> list[Fault]:
        """The first and the last id of each text of message i that splits into
        two ids, split (the same bytes in other ids)."""
        out = []
        for name, s, e in self.texts[i]:
            splits = [(k, sp) for k in self._id_range(s, e) if (sp := self._split(self.ids[k])) is not None]
            for k, split in {splits[0][0]: splits[0][1], splits[-1][0]: splits[-1][1]}.items() if splits else ():
                ids = self.ids[:k] + list(split) + self.ids[k + 1 :]
                out.append(Fault("retokenization", i, f"{name}: id {k} {self.vocab.id_bytes(self.ids[k])!r} split", ids))
        return out

    def _split(self, tid: int) -> tuple[int, int] | None:
        """Two ids whose bytes concatenate to those of `tid` (not special), or None."""
        if tid in self.special:
            return None
        raw = self.vocab.id_bytes(tid)
        for j in range(1, len(raw)):
            head, tail = self.by_bytes.get(raw[:j]), self.by_bytes.get(raw[j:])
            if head is not None and tail is not None:
                return head, tail
        return None

    def _swaps(self, i: int) -> list[Fault]:
        """Special ids of message i's wrapper, each replaced by another special id:
        its opener (the first special id of its part, or the last role opener
        before its first text where the template gives no part), the specials
        between its texts, its closer (the last special id of its part)."""
        texts = self.texts[i]
        if not texts:
            return []
        first, last = texts[0][1], texts[-1][2]
        prev_end = self.texts[i - 1][-1][2] if i > 0 and self.texts[i - 1] else 0
        specials = [k for k in range(len(self.ids)) if self.ids[k] in self.special]
        b_first, b_last = int(self.byte_at[first]), int(self.byte_at[last])
        picks: dict[str, int] = {}
        lo, hi = self.starts[i], self.starts[i + 1]
        before = [k for k in specials if self.id_end[k] <= b_first]
        if lo is not None:
            lead = [k for k in before if self.id_start[k] >= self.byte_at[lo]]
            if lead:
                picks["opener"] = lead[0]
        else:
            lead = [k for k in before if self.ids[k] in self.openers and self.id_start[k] >= self.byte_at[prev_end]]
            if lead:
                picks["opener"] = lead[-1]
        inner = [k for k in specials if b_first <= self.id_start[k] and self.id_end[k] <= b_last]
        if inner:
            picks["inner"] = inner[len(inner) // 2]
        if hi is not None:
            tail = [k for k in specials if self.id_start[k] >= b_last and self.id_end[k] <= self.byte_at[hi]]
            if tail:
                picks["closer"] = tail[-1]
        pool = sorted((self.boundary | self.openers) - self.trim)
        out = []
        for where, k in picks.items():
            other = self.rng.choice([t for t in pool if t != self.ids[k]])
            ids = self.ids[:k] + [other] + self.ids[k + 1 :]
            what = f"{where} id {k} {self.vocab.id_bytes(self.ids[k])!r} -> {self.vocab.id_bytes(other)!r}"
            out.append(Fault("boundary", i, what, ids))
        return out


def _words(text: str) -> list[tuple[int, str]]:
    import re

    return [(m.start(), m.group()) for m in re.finditer(r"[A-Za-z]{3,}", text)]


def _sessions(scorer: Scorer) -> list[tuple[str, list[dict[str, Any]]]]:
    out = []
    for name, msgs in (("agent", AGENT), ("chat", CHAT)):
        msgs = copy.deepcopy(msgs)
        try:
            scorer.tito.apply_chat_template(msgs, add_generation_prompt=False, tools=TOOLS)
        except RenderError:
            msgs = _single_calls(msgs)  # Llama 3.1: "This model only supports single tool-calls at once!"
            scorer.tito.apply_chat_template(msgs, add_generation_prompt=False, tools=TOOLS)
        out.append((name, msgs))
    return out


def attribute_all(fixture: str, family: str, dump: Path | None = None) -> Tally:
    """Plant every fault in every message of every session; count the right
    attributions (the full path's). The fast path (`mode="fast"`, which does
    not see a pure retokenization) must place every other fault the same;
    `Scorer.diagnose` (what `tito-fast diff` shows) the content and boundary
    faults. With `dump`, every faulty session is also written there as JSONL
    and scored by `run_score` (the native session check where the family
    has one), which must place them the same."""
    scorer = _scorer(fixture, family)
    fast = Scorer(tito=scorer.tito, mode="fast")
    tally = Tally()
    wanted: dict[str, tuple[str, int, str]] = {}
    lines: list[str] = []
    for name, msgs in _sessions(scorer):
        planter = Planter(scorer, msgs, seed=len(name))
        clean = scorer.score(Record("t.jsonl:1", name, msgs, np.asarray(planter.ids, dtype=np.uint32), TOOLS))
        assert not clean.items and not clean.mismatches, (family, name, clean.items)
        for i, m in enumerate(msgs):
            for f in planter.faults(i):
                tally.planted[f.kind] += 1
                record = Record("t.jsonl:1", name, msgs, np.asarray(f.ids, dtype=np.uint32), TOOLS)
                got = [(it.message_index, it.role) for it in scorer.score(record).items]
                where = f"{name} message {i} ({m['role']}) {f.kind} [{f.what}]"
                if got and all(g == (i, m["role"]) for g in got):
                    tally.right[f.kind] += 1
                else:
                    tally.wrong.append(f"{where}: items at {got}")
                if not (f.kind == "retokenization" and fast.fast_path):
                    quick = [(it.message_index, it.role) for it in fast.score(record).items]
                    if quick != got:
                        tally.wrong.append(f"{where}: fast path items at {quick}, full path {got}")
                if f.kind in ("content", "boundary"):  # a text edit and an id edit: diff numbers them as score does
                    tally.diff_checked += 1
                    shown = [(it.message_index, it.role) for it in scorer.diagnose(record)[1].items]
                    if shown != got:
                        tally.diff_wrong.append(f"{where}: diff shows {shown}, score {got}")
                sid = f"{name}-{len(lines)}"
                wanted[sid] = (where, i, m["role"])
                line = {"session_id": sid, "messages": msgs, "tools": TOOLS, "token_ids": f.ids}
                lines.append(json.dumps(line, ensure_ascii=False))
    if dump is not None:
        dump.write_text("\n".join(lines) + "\n", encoding="utf-8")
        run = run_score(dump, scorer=scorer)
        assert not run.bad and len(run.results) == len(lines)
        for r in run.results:
            where, i, role = wanted[r.session_id]
            got = [(it.message_index, it.role) for it in r.items]
            if not got or any(g != (i, role) for g in got):
                tally.wrong.append(f"{where}: run_score ({scorer.renderer}) items at {got}")
    return tally


@pytest.mark.parametrize(("fixture", "family"), PAIRS)
def test_every_planted_fault_is_named_by_its_message(fixture: str, family: str, tmp_path: Path) -> None:
    tally = attribute_all(fixture, family, tmp_path / "faults.jsonl")
    assert not tally.wrong, f"{family}: {len(tally.wrong)} wrong of {sum(tally.planted.values())}:\n" + "\n".join(tally.wrong)
    # Every kind was planted (the tool-call kinds in each assistant message with calls).
    assert all(tally.planted[k] > 0 for k in KINDS), tally.planted
    assert tally.right == tally.planted
    assert tally.diff_checked > 20 and not tally.diff_wrong, "\n".join(tally.diff_wrong)


@pytest.mark.parametrize(
    ("fixture", "family", "session", "at"),
    [("llama31", "llama3", "chat", (0, 4)), ("deepseek_v32", "deepseekv32", "agent", (3, 8))],
)
def test_diff_numbers_the_records_messages(
    fixture: str, family: str, session: str, at: tuple[int, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tito-fast diff` on a dump names the record's message (as `score` does),
    not the rendered block: Llama 3.1 renders a system block the record does
    not have, DeepSeek V3.2 no block for a tool result."""
    scorer = _scorer(fixture, family)
    msgs = dict(_sessions(scorer))[session]
    planter = Planter(scorer, msgs, seed=0)
    dump = tmp_path / "d.jsonl"
    wanted = {}
    with dump.open("w") as out:
        for i in at:
            fault = next(f for f in planter.faults(i) if f.kind == "content")
            out.write(json.dumps({"session_id": f"s{i}", "messages": msgs, "tools": TOOLS, "token_ids": fault.ids}) + "\n")
            wanted[f"s{i}"] = (i, msgs[i]["role"])
    for sid, (i, role) in wanted.items():
        args = ("--session", sid, "--tokenizer", f"fixture:{fixture}", "--family", family, "--color", "never")
        code = cli("diff", str(dump), *args)
        lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("difference at")]
        assert code == 1 and lines, sid
        assert all(line.split(" (")[0].endswith(f"role {role}, message {i}") for line in lines), (sid, lines)


# -- assemble ----------------------------------------------------------------


def _calls(tito: TitoTokenizer, session: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calls an agent loop makes for `messages`: one per assistant turn, its
    request the messages before it, its prompt the ids accumulated so far (the
    family's merge), its completion the template's render of the turn."""
    # A turn without reasoning is not what these templates' generation prompt leads to with thinking on.
    messages = [
        dict(m, reasoning_content=f"Thinking about turn {k}.") if m["role"] == "assistant" and not m.get("reasoning_content") else m
        for k, m in enumerate(messages)
    ]
    calls: list[dict[str, Any]] = []
    stored: list[int] | None = None
    prev_end = 0
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        history = messages[:k]
        opener = tito.apply_chat_template(history, add_generation_prompt=True, tools=TOOLS)
        try:
            prompt = tito.encode(opener) if stored is None else tito.merge_tokens(messages[:prev_end], history, stored, TOOLS)
        except AppendOnlyError:  # DeepSeek V3.2 cannot append a user turn: the engine renders the prompt afresh
            prompt = tito.encode(opener)
        completion = tito.completion_ids(history, m, TOOLS, opener)
        calls.append({"session_id": session, "call_index": len(calls), "prompt_ids": prompt, "completion_ids": completion,
                      "messages": copy.deepcopy(history), "tools": TOOLS})  # fmt: skip
        stored = prompt + completion
        prev_end = k + 1
    return calls


ASSEMBLE_PAIRS = PAIRS


@pytest.mark.parametrize(("fixture", "family"), ASSEMBLE_PAIRS)
def test_assemble_names_each_id_by_the_message_of_its_call(fixture: str, family: str) -> None:
    """Sampled ids (loss 1) are the response of their call (role assistant,
    message len(messages)); every prompt id of a text of message i (its
    content, reasoning, tool-call arguments) carries message i and its role;
    the message index never goes back."""
    from tito_fast.chains import assemble

    scorer = _scorer(fixture, family)
    tito = scorer.tito
    calls = [c for name, msgs in _sessions(scorer) for c in _calls(tito, name, msgs)]
    a = assemble(calls, tokenizer=tito.tokenizer, family=family)
    by_call = {(c["session_id"], c["call_index"]): c for c in calls}
    vocab = scorer.cmp.vocab
    assert vocab is not None
    checked = 0
    for session, chains in a.sessions.items():
        for chain in chains:
            index, roles, loss, call_of = chain.message_index, chain.role, chain.loss_mask, chain.call_index
            assert (np.diff(index) >= 0).all(), session
            for p in np.flatnonzero(loss).tolist():
                n = len(by_call[(session, int(call_of[p]))]["messages"])
                assert (int(index[p]), roles[p]) == (n, "assistant"), (session, p)
            last = by_call[(session, int(call_of[-1]))]
            messages = last["messages"]
            prompt_len = len(last["prompt_ids"])
            ends = np.cumsum([len(vocab.id_bytes(int(t))) for t in chain.ids[:prompt_len]])
            starts = np.concatenate([[0], ends[:-1]])
            text = b"".join(vocab.id_bytes(int(t)) for t in chain.ids[:prompt_len])
            for i, m in enumerate(messages):
                assert i in index[:prompt_len], (session, i)
                for piece in _message_texts(m):
                    at = text.find(piece.encode("utf-8"))
                    if at < 0:  # not rendered (e.g. reasoning the template drops from history)
                        continue
                    span = np.flatnonzero((ends > at) & (starts < at + len(piece.encode("utf-8"))))
                    assert all((int(index[p]), roles[p]) == (i, m["role"]) for p in span), (session, i, piece)
                    checked += 1
    assert checked >= 10, checked


def _message_texts(m: dict[str, Any]) -> list[str]:
    texts = [m[k] for k in ("content", "reasoning_content") if m.get(k)]
    for call in m.get("tool_calls") or []:
        texts += [v for v in call["function"]["arguments"].values() if isinstance(v, str)]
    return texts


def test_mistral_faults_are_named_but_an_answer_after_tool_results(tmp_path: Path) -> None:
    """Devstral Small's template (Mistral's special tokens on the Qwen3
    vocabulary): every planted fault is named by its message, except in an
    assistant answer that follows tool results. Mistral's format opens no
    block for it (the text follows `[/TOOL_RESULTS]` directly), so a
    difference there is named as the tool message before it."""
    tally = attribute_all("devstral", "mistral", tmp_path / "faults.jsonl")
    assert sum(tally.planted.values()) > 100 and tally.wrong
    assert all(w.startswith("agent message 5 (assistant)") and "items at [(4, 'tool')]" in w for w in tally.wrong), tally.wrong
    assert len(tally.wrong) <= 4
