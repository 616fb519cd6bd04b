"""Generate example rollout dumps with planted, labelled TITO faults.

Sessions are agent conversations (system, user, assistant turns with
reasoning and tool calls, tool results, sometimes a user follow-up). Clean
sessions carry the ids a rollout accumulates with the family's merge
(`tito_fast.session.verify.replay`, the reference algorithm); faulty ones carry ids
with one planted fault, labelled in `metadata`:

- `retokenize_drift`: a generated token replaced by two that decode to the
  same text (the model sampled `Hel`+`lo`, re-encoding gives `Hello`);
- `cut_thinking`: the ids come from the tokenizer's native template, which
  drops earlier turns' reasoning once a new user message arrives;
- `tojson_spacing`: one tool call's arguments as the model wrote them
  (compact JSON) where the template re-serialises them with spaces;
- `missing_splice_newline`: the `\\n` after `<|im_end|>` lost at one turn seam;
- `trimmed_whitespace`: an assistant body stripped of the blank line after
  its reasoning (the field report's case);
- `changed_tool_output`: a tool result that differs from the recorded one;
- `wrong_glm_boundary` (GLM-4.7): `<|user|>` where `<|observation|>` belongs.

Usage:
    python examples/make_dump.py --tokenizer fixture:qwen3 --family qwen3 --out examples/qwen3_dump.jsonl
    python examples/make_dump.py --tokenizer fixture:glm47 --family glm47 --out examples/glm47_dump.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import re
from typing import Any

from tito_fast.chat.families import get_tito_tokenizer
from tito_fast.score.dump import write_jsonl, write_parquet
from tito_fast.tokenizer.load import load_tokenizer
from tito_fast.session.verify import replay

WORDS = (
    "the model reads file src/main.rs and then runs the tests; 3 failed with an error in parse() "
    "so it opens the module, fixes the loop bound, re-runs cargo test and all 42 pass. "
    "unicode: café naïve 你好 🙂 — done"
).split()
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}, "timeout": {"type": "integer"}}, "required": ["cmd"]},
        },
    }
]
QWEN_FAULTS = (
    "retokenize_drift",
    "cut_thinking",
    "tojson_spacing",
    "missing_splice_newline",
    "trimmed_whitespace",
    "changed_tool_output",
)
GLM_FAULTS = ("wrong_glm_boundary", "changed_tool_output", "retokenize_drift")
# What each fault looks like to the reference and to the diagnosis.
EXPECT: dict[str, dict[str, Any]] = {
    "none": {"types": [], "kind": None},
    "retokenize_drift": {"types": [], "kind": "retokenization"},  # invisible to the reference's metric
    "cut_thinking": {"types": ["assistant_text"], "kind": "content"},
    "tojson_spacing": {"types": ["assistant_text"], "kind": "whitespace_only"},
    "missing_splice_newline": {"types": ["special_token_count"], "kind": None},
    "trimmed_whitespace": {"types": ["assistant_text"], "kind": "whitespace_only"},
    "changed_tool_output": {"types": ["non_assistant_text"], "kind": "content"},
    "wrong_glm_boundary": {"types": ["special_token_type"], "kind": "splice_seam"},
}


def conversation(rng: random.Random, turns: int, follow_up: bool) -> list[dict[str, Any]]:
    def text(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": text(25)},
    ]
    for t in range(turns - 1):
        args = {"cmd": f"{rng.choice(['cargo test', 'ls -la', 'cat src/main.rs', 'grep -n parse src'])}", "timeout": rng.choice([10, 30, 60])}
        call = {"id": f"call_{t}", "type": "function", "function": {"name": "run", "arguments": json.dumps(args)}}
        msgs.append({"role": "assistant", "content": text(8), "reasoning_content": text(20), "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{t}", "content": text(40)})
        if follow_up and t == (turns - 2) // 2:
            msgs.append({"role": "assistant", "content": text(15), "reasoning_content": text(12)})
            msgs.append({"role": "user", "content": "Thanks. " + text(10)})
    msgs.append({"role": "assistant", "content": text(20), "reasoning_content": text(15)})
    return msgs


def _edit_nth(text: str, pattern: str, repl: Any, n: int, start: int = 0) -> str:
    """Apply `repl` to the n-th match of `pattern` at or after `start` (wrapping around)."""
    matches = [m for m in re.finditer(pattern, text, flags=re.S) if m.start() >= start]
    if not matches:
        raise ValueError(f"pattern {pattern!r} not found")
    m = matches[n % len(matches)]
    new = str(repl(m)) if callable(repl) else str(repl)
    return text[: m.start()] + new + text[m.end() :]


def plant(tito: Any, rng: random.Random, msgs: list[dict[str, Any]], fault: str) -> tuple[list[int], list[dict[str, Any]]]:
    """(the session's ids, its messages) with `fault` planted."""
    ids, _ = replay(tito, msgs, TOOLS)
    if fault == "none":
        return ids, msgs
    full = tito.apply_chat_template(msgs, add_generation_prompt=False, tools=TOOLS)
    n = rng.randrange(1 << 16)
    # Edits go after the system prompt (its tool instructions quote a <tool_call> example).
    first_user = max(full.find("<|im_start|>user"), full.find("<|user|>"), 0)
    if fault == "retokenize_drift":
        # Split one multi-byte assistant token into two that decode to the same text.
        think_end = tito.tokenizer.convert_tokens_to_ids("</think>")
        for _ in range(200):
            k = rng.randrange(len(ids))
            piece = str(tito.tokenizer.decode([ids[k]]))
            if len(piece) >= 4 and piece.isascii() and k > 0 and think_end in ids[max(0, k - 40) : k]:
                split = tito.encode(piece[:2]) + tito.encode(piece[2:])
                if split != [ids[k]] and tito.tokenizer.decode(split) == piece:
                    return ids[:k] + split + ids[k + 1 :], msgs
        raise ValueError("no token to split")
    if fault == "cut_thinking":
        native = get_tito_tokenizer(tito.tokenizer, "default")  # the tokenizer's own template prunes reasoning
        return native.encode(native.apply_chat_template(msgs, add_generation_prompt=False, tools=TOOLS)), msgs
    if fault == "tojson_spacing":
        edited = _edit_nth(full, r'<tool_call>\n\{.*?</tool_call>', lambda m: m.group(0).replace('": ', '":').replace(', "', ',"'), n, first_user)
    elif fault == "missing_splice_newline":
        edited = _edit_nth(full, r"<\|im_end\|>\n(?=<\|im_start\|>user)", "<|im_end|>", n, first_user)
    elif fault == "trimmed_whitespace":
        edited = _edit_nth(full, r"</think>\n\n", "</think>", n, first_user)
    elif fault == "changed_tool_output":
        edited = _edit_nth(full, r"<tool_response>\n?(\S+)", lambda m: m.group(0)[:-len(m.group(1))] + "ERROR", n, first_user)
    elif fault == "wrong_glm_boundary":
        edited = _edit_nth(full, r"<\|observation\|>", "<|user|>", n, first_user)
    else:
        raise ValueError(f"unknown fault {fault!r}")
    out = tito.encode(edited)
    while out and out[-1] in tito.trailing_token_ids:
        out.pop()  # the model does not generate the template's trailing whitespace
    return out, msgs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", default="fixture:qwen3")
    ap.add_argument("--family", default="qwen3")
    ap.add_argument("--out", required=True, help=".jsonl or .parquet")
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--turns", type=int, default=4, help="assistant turns per session (at most; at least 2)")
    ap.add_argument("--clean-share", type=float, default=0.4)
    ap.add_argument("--seed", type=int, default=0)
    ns = ap.parse_args()
    rng = random.Random(ns.seed)
    tito = get_tito_tokenizer(load_tokenizer(ns.tokenizer), ns.family)
    faults = GLM_FAULTS if ns.family.startswith("glm") else QWEN_FAULTS
    rows = []
    for i in range(ns.sessions):
        fault = "none" if rng.random() < ns.clean_share else faults[i % len(faults)]
        msgs = conversation(rng, rng.randint(2, max(2, ns.turns)), follow_up=fault == "cut_thinking" or rng.random() < 0.3)
        ids, msgs = plant(tito, rng, msgs, fault)
        rows.append(
            {
                "session_id": f"{ns.family}-{i:04d}",
                "family": tito.family,
                "messages": msgs,
                "tools": TOOLS,
                "token_ids": ids,
                "metadata": {"planted": fault, "expect": EXPECT[fault]},
            }
        )
    (write_parquet if ns.out.endswith(".parquet") else write_jsonl)(ns.out, rows)
    print(f"wrote {len(rows)} sessions to {ns.out}")


if __name__ == "__main__":
    main()
