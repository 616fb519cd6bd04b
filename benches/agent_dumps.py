"""Rollout dumps shaped like agent runs, for the whole-command benchmarks.

Each session: a system prompt, a task, then 3-150 assistant turns (a
log-uniform count: most sessions are short, some are long), each with
reasoning (most turns) and one to three tool calls, whose results are long
and varied: build and test logs, JSON documents, Python tracebacks, source
files, unicode prose (CJK, Cyrillic, Arabic, emoji, accents); sometimes a
user follow-up, an empty reasoning or an empty answer. The ids are the
session's full render as the family renders it (`tito.encode` of
`apply_chat_template`), except in the sessions that differ (`differing`,
75% by default): one edit to the rendered text before encoding, in a tool
result, an assistant answer, its reasoning or the whitespace of a turn,
as engines and harnesses drift. The edit is found again in the text by
its message's own words, so it lands in that message whatever the
template. The edits draw from their own generator, so dumps of one seed
hold the same sessions whatever the share that differs (clean and
differing costs compare like with like).

Example:
    >>> path = write_dump(tmp / "qwen3.jsonl", "qwen3", sessions=3)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

from tito_fast.chat.families import TitoTokenizer, get_tito_tokenizer
from tito_fast.score.dump import write_jsonl
from tito_fast.testing import fixtures

#: The families the whole-command benchmark covers (fixture, family).
FAMILIES = {"qwen3": "qwen3", "glm47": "glm47", "llama31": "llama3", "minimax_m27": "minimax_m27"}

TOOLS = [
    {"type": "function", "function": {"name": name, "description": desc, "parameters": {
        "type": "object", "properties": {k: {"type": t} for k, t in props.items()}, "required": list(props)[:1]}}}
    for name, desc, props in [
        ("run", "Run a shell command.", {"cmd": "string", "timeout": "integer"}),
        ("read_file", "Read a file.", {"path": "string", "start": "integer", "end": "integer"}),
        ("search", "Search the repository.", {"query": "string", "glob": "string"}),
    ]
]  # fmt: skip

_WORDS = "the build reads config parses input writes output checks result retries fails passes opens closes module test value".split()
_PROSE = [
    "Das Ergebnis ist fertig — naïve café résumé.", "结果已经准备好了，测试全部通过。", "Результат готов, все тесты пройдены.",
    "النتيجة جاهزة وجميع الاختبارات ناجحة.", "✅ done 🚀 🙂 — ok", "テストはすべて成功しました。", "결과가 준비되었습니다.",
]  # fmt: skip


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def _log(rng: random.Random) -> str:
    lines = []
    for i in range(rng.randint(5, 60)):
        level = rng.choice(["INFO", "INFO", "INFO", "WARN", "DEBUG", "ERROR"])
        lines.append(f"2026-12-04T10:{i % 60:02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z {level} worker[{rng.randint(0, 7)}] "
                     f"{_words(rng, rng.randint(3, 12))} ({rng.random() * 10:.3f}s)")  # fmt: skip
    return "\n".join(lines)


def _json_doc(rng: random.Random) -> str:
    doc = {
        "status": rng.choice(["ok", "failed", "partial"]),
        "items": [{"id": rng.randint(1, 10**6), "name": _words(rng, 2), "score": round(rng.random(), 4), "tags": [_words(rng, 1)] * rng.randint(0, 3),
                   "note": rng.choice(_PROSE)} for _ in range(rng.randint(1, 12))],
        "meta": {"elapsed_ms": rng.randint(1, 99999), "path": f"/srv/data/{_words(rng, 1)}.json", "ok": rng.random() < 0.5, "next": None},
    }  # fmt: skip
    return json.dumps(doc, indent=rng.choice([None, 2]), ensure_ascii=rng.random() < 0.5)


def _traceback(rng: random.Random) -> str:
    frames = [f'  File "/app/src/{_words(rng, 1)}.py", line {rng.randint(1, 900)}, in {_words(rng, 1)}\n    {_words(rng, 4)}()'
              for _ in range(rng.randint(2, 9))]  # fmt: skip
    return "Traceback (most recent call last):\n" + "\n".join(frames) + f"\nValueError: {_words(rng, 6)}"


def _code(rng: random.Random) -> str:
    body = []
    for i in range(rng.randint(4, 40)):
        indent = "    " * rng.randint(1, 3)
        body.append(f"{indent}let {_words(rng, 1)}_{i} = {_words(rng, 1)}(&{_words(rng, 1)}, {rng.randint(0, 99)})?; // {_words(rng, 3)}")
    return f"fn {_words(rng, 1)}(input: &str) -> Result<u32, Error> {{\n" + "\n".join(body) + "\n}\n"


def _prose(rng: random.Random) -> str:
    return " ".join(rng.choice(_PROSE) for _ in range(rng.randint(2, 30)))


def _tool_output(rng: random.Random) -> str:
    kind = rng.choice([_log, _json_doc, _traceback, _code, _prose])
    return str(kind(rng))


def session(rng: random.Random, turns: int, max_calls: int = 3) -> list[dict[str, Any]]:
    """One agent session of `turns` assistant turns, each with at most `max_calls` tool calls."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the tools; answer briefly."},
        {"role": "user", "content": f"{_words(rng, 20)} {rng.choice(_PROSE)}"},
    ]
    call = 0
    for t in range(turns - 1):
        calls = []
        for _ in range(min(max_calls, rng.choice([1, 1, 1, 2, 3]))):
            name = rng.choice(["run", "read_file", "search"])
            args = {"run": {"cmd": f"cargo test -p {_words(rng, 1)}", "timeout": rng.choice([30, 60])},
                    "read_file": {"path": f"src/{_words(rng, 1)}.rs", "start": 1, "end": rng.randint(20, 400)},
                    "search": {"query": _words(rng, 2), "glob": "**/*.rs"}}[name]  # fmt: skip
            calls.append({"id": f"call_{call}", "type": "function", "function": {"name": name, "arguments": args}})
            call += 1
        turn: dict[str, Any] = {"role": "assistant", "content": _words(rng, rng.randint(0, 20)), "tool_calls": calls}
        if rng.random() < 0.7:
            turn["reasoning_content"] = _words(rng, rng.randint(5, 60))
        msgs.append(turn)
        for c in calls:
            msgs.append({"role": "tool", "tool_call_id": c["id"], "content": _tool_output(rng)})
        if rng.random() < 0.05 and t < turns - 2:
            msgs.append({"role": "assistant", "content": _words(rng, 12)})
            msgs.append({"role": "user", "content": f"{rng.choice(_PROSE)} {_words(rng, 8)}"})
    final: dict[str, Any] = {"role": "assistant", "content": f"{_words(rng, 25)} {rng.choice(_PROSE)}"}
    if rng.random() < 0.7:
        final["reasoning_content"] = _words(rng, 30)
    msgs.append(final)
    return msgs


def _edit(rng: random.Random, text: str, msgs: list[dict[str, Any]], start: int) -> str | None:
    """One drift in the rendered `text`, inside a message found by its own words (after `start`), or None."""
    kind = rng.choice(["tool", "answer", "reasoning", "whitespace"])
    if kind == "tool":
        pool = [m["content"] for m in msgs if m["role"] == "tool"]
    elif kind == "reasoning":
        pool = [m["reasoning_content"] for m in msgs if m["role"] == "assistant" and m.get("reasoning_content")]
    else:
        pool = [m["content"] for m in msgs[2:] if m["role"] == "assistant" and m.get("content")]
    rng.shuffle(pool)
    for content in pool[:8]:
        piece = content[: min(len(content), 40)]
        at = text.find(piece, start)
        if len(piece) < 8 or at < 0:
            continue
        k = at + rng.randrange(min(len(content), 40))
        if kind == "whitespace":  # a space doubled, or the turn's leading text stripped of a newline
            return text[:k] + " " + text[k:]
        return text[:k] + rng.choice(["X", "é", "0", "🙂"]) + text[k + 1 :]
    return None


def records(fixture: str, sessions: int, *, differing: float = 0.75, max_turns: int = 150, seed: int = 0) -> list[dict[str, Any]]:
    """`sessions` records of the family's agent sessions (see the module doc)."""
    tito = tito_for(fixture)
    rng = random.Random(seed)
    out = []
    for i in range(sessions):
        turns = max(3, min(max_turns, int(3 * math.exp(rng.random() * math.log(50)))))
        msgs = session(rng, turns, 1 if fixture == "llama31" else 3)  # Llama 3.1's template takes one call a turn
        text = tito.apply_chat_template(msgs, add_generation_prompt=False, tools=TOOLS)
        # the drift draws from its own generator: dumps of any share hold the same sessions
        drift = random.Random(f"{seed}-{i}")
        if drift.random() < differing:
            edited = _edit(drift, text, msgs, text.find(msgs[1]["content"][:20]))
            text = edited if edited is not None else text
        ids = tito.encode(text)
        while ids and ids[-1] in tito.trailing_token_ids:
            ids.pop()  # the model does not generate the template's trailing whitespace
        out.append({"session_id": f"{fixture}-{i:04d}", "messages": msgs, "tools": TOOLS, "token_ids": ids})
    return out


def write_dump(path: Path, fixture: str, sessions: int, **kw: Any) -> Path:
    """`records(...)` as a JSONL dump at `path`."""
    write_jsonl(path, records(fixture, sessions, **kw))
    return path


TITOS: dict[str, TitoTokenizer] = {}


def tito_for(fixture: str) -> TitoTokenizer:
    if fixture not in TITOS:
        TITOS[fixture] = get_tito_tokenizer(fixtures.load_tokenizer(fixture), FAMILIES[fixture])
    return TITOS[fixture]
