"""Make rollout dumps the way Miles makes them, with Miles' own session lists (run by hand).

The parity test `tests/score/test_miles_dumps.py` scores the dumps this writes to
`tests/data/miles/` with nothing but `--tokenizer` and `--family` and compares
every session's mismatch list with the one Miles computed. This script is the
only place that runs Miles: it needs a Miles checkout and is never run by the
tests or CI. It loads Miles through `../shared/tools/miles_reference.py`
(the steering repository's tool), which imports the real Miles code from
`$MILES_DIR` at run time; nothing of Miles is copied here.

Every session is a simulated agent rollout through Miles' own pieces:

- the tokenizer as Miles loads it for the family (its fixed chat template
  installed) and Miles' `get_tito_tokenizer`;
- turn 1's prompt is Miles' render; every later prompt is Miles'
  `merge_tokens` of the stored messages, the new request and the stored ids;
- a completion is what the engine samples: the template's render of the
  turn the model writes (its reasoning block always present, empty or not),
  less the whitespace the template puts after the end token; GLM's model
  stops on `<|observation|>` / `<|user|>`;
- what the agent stores and sends back is the parsed message, which may
  differ from what was sampled, as it does in the wild (the scenario names
  which): reasoning dropped, an empty reasoning block parsed to no
  `reasoning_content`, compact tool-call JSON re-serialised with spaces,
  trailing whitespace stripped, a token the engine split where a re-encode
  joins, a tool result rewritten afterwards;
- the session's list is Miles' `SessionRegistry.compute_session_mismatch`.

Usage (from the repository root):
    MILES_DIR=<miles checkout> REF_TOKENIZERS=<folder of tokenizer folders> \\
        python tools/miles_dumps.py --out tests/data/miles
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
from pathlib import Path
from typing import Any

# family -> (fixture tokenizer, the reference tool's tokenizer folder)
FAMILIES = {
    "qwen3": ("qwen3", "qwen3"),
    "qwen35": ("qwen35", "qwen35"),
    "minimax_m27": ("minimax_m27", "minimax_m2"),
    "glm47": ("glm47", "glm47"),
    "deepseekv32": ("deepseek_v32", "deepseek_v32"),
}
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
WORDS = "the agent reads src/main.rs runs cargo test 3 failed fixes parse() loop bound all 42 pass café 你好 🙂 done".split()
SCENARIOS = ("clean", "drop_reasoning", "empty_reasoning", "compact_tool_json", "strip_content", "retokenized", "tool_output_changed")


def _reference() -> Any:
    here = Path(__file__).resolve()
    path = here.parents[2] / "shared" / "tools" / "miles_reference.py"
    spec = importlib.util.spec_from_file_location("miles_reference", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["miles_reference"] = module
    spec.loader.exec_module(module)
    return module


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _split_one_token(tok: Any, ids: list[int], rng: random.Random) -> list[int]:
    """One completion token replaced by two that decode to the same text (the engine sampled them)."""
    for _ in range(300):
        k = rng.randrange(len(ids))
        piece = tok.decode([ids[k]])
        if len(piece) >= 4 and piece.isascii() and piece.strip():
            split = tok.encode(piece[:2], add_special_tokens=False) + tok.encode(piece[2:], add_special_tokens=False)
            if len(split) == 2 and tok.decode(split) == piece:
                return ids[:k] + split + ids[k + 1 :]
    return ids


def session(ref: Any, tito: Any, family: str, rng: random.Random, scenario: str, follow_up: bool) -> tuple[list[dict[str, Any]], list[int]]:
    """(the messages the agent stored, the session's accumulated ids)."""
    tok = tito.tokenizer
    trailing = set(tito.trailing_token_ids)
    stop = {"glm47": ("<|observation|>", "<|user|>")}.get(family)
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": _text(rng, 12)},
    ]
    stored_msgs: list[dict[str, Any]] | None = None
    stored_ids: list[int] = []
    turns = rng.randint(2, 4)
    fault_turn = rng.randrange(turns)
    call_no = 0
    for t in range(turns):
        last = t == turns - 1
        fault = scenario if t == fault_turn else "clean"
        if stored_msgs is None:
            prompt = list(tito.apply_chat_template(history, tools=TOOLS, add_generation_prompt=True, tokenize=True))
        else:
            prompt = list(tito.merge_tokens(stored_msgs, history, stored_ids, TOOLS))
        reasoning = "" if fault == "empty_reasoning" or rng.random() < 0.25 else _text(rng, 8)
        content = _text(rng, 6) if (last or rng.random() < 0.6) else ""
        if fault == "strip_content":
            content = (content or _text(rng, 3)) + "\n\n"
        calls = []
        if not last:
            args = {"cmd": rng.choice(["cargo test", "ls -la", "cat src/main.rs"]), "timeout": rng.choice([10, 30])}
            calls.append({"id": f"call_{call_no}", "type": "function", "function": {"name": "run", "arguments": json.dumps(args)}})
            call_no += 1
        sampled: dict[str, Any] = {"role": "assistant", "content": content, "reasoning_content": reasoning}
        if calls:
            sampled["tool_calls"] = calls
        opener = tito.apply_chat_template(history, tools=TOOLS, add_generation_prompt=True)
        rendered = tito.apply_chat_template(history + [sampled], tools=TOOLS, add_generation_prompt=False)
        if not rendered.startswith(opener) and not reasoning:
            # a model whose template has no empty reasoning block (MiniMax) always reasons
            reasoning = sampled["reasoning_content"] = _text(rng, 8)
            rendered = tito.apply_chat_template(history + [sampled], tools=TOOLS, add_generation_prompt=False)
        if not rendered.startswith(opener):
            raise ValueError(f"{family}: the generation prompt does not lead into the sampled turn")
        completion_text = rendered[len(opener) :]
        if fault == "compact_tool_json" and calls:
            compact = json.dumps(json.loads(calls[0]["function"]["arguments"]), separators=(",", ":"))
            spaced = json.dumps(json.loads(calls[0]["function"]["arguments"]))
            if spaced in completion_text:
                completion_text = completion_text.replace(spaced, compact, 1)
        completion = list(tok.encode(completion_text, add_special_tokens=False))
        while completion and completion[-1] in trailing and not tok.decode(completion[-1:]).strip():
            completion.pop()  # the model stops at its end token
        if stop is not None:
            completion.append(tok.convert_tokens_to_ids(stop[0] if calls else stop[1]))
        if fault == "retokenized":
            completion = _split_one_token(tok, completion, rng)
        stored: dict[str, Any] = {"role": "assistant", "content": content}
        if fault == "strip_content":
            stored["content"] = content.strip()
        if fault not in ("drop_reasoning", "empty_reasoning"):
            stored["reasoning_content"] = reasoning
        if calls:
            stored["tool_calls"] = calls
        stored_ids = prompt + completion
        stored_msgs = history + [stored]
        history = list(stored_msgs)
        if calls:
            history.append({"role": "tool", "tool_call_id": calls[0]["id"], "content": _text(rng, 10)})
        if follow_up and t == 0 and not last:
            history.append({"role": "user", "content": "Also: " + _text(rng, 5)})
    assert stored_msgs is not None
    if scenario == "tool_output_changed":
        tools_at = [i for i, m in enumerate(stored_msgs) if m["role"] == "tool"]
        if tools_at:
            i = rng.choice(tools_at)
            stored_msgs[i] = {**stored_msgs[i], "content": stored_msgs[i]["content"] + " (edited)"}
    return stored_msgs, stored_ids


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/data/miles")
    ap.add_argument("--sessions", type=int, default=14)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("families", nargs="*", default=list(FAMILIES))
    ns = ap.parse_args()
    ref = _reference()
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    for family in ns.families:
        fixture, folder = FAMILIES[family]
        tok = ref.load_tokenizer(ref.tok_path(folder), family)
        tito = ref.ref_tito_tokenizer(tok, family)
        ours = None
        if family == "deepseekv32":
            # DeepSeek's own V3.2 encoder (what miles-tito-tokenizers ships) renders some sessions
            # unlike Miles' vendored copy: say which, so the parity test knows what to expect.
            from tito_fast import get_tito_tokenizer
            from tito_fast.testing import fixtures

            spec = importlib.util.find_spec("miles_tito_tokenizers.encoders.deepseek_v32")
            assert spec is not None and spec.origin, "pip install miles-tito-tokenizers"
            ours = get_tito_tokenizer(fixtures.load_tokenizer(fixture), family, encoder_path=spec.origin)
        rng = random.Random(f"{ns.seed}-{family}")
        rows = []
        for i in range(ns.sessions):
            scenario = SCENARIOS[i % len(SCENARIOS)]
            follow_up = i % 2 == 1
            msgs, ids = session(ref, tito, family, rng, scenario, follow_up)
            listed = ref.compute_session_mismatch(tito, msgs, ids, TOOLS)
            meta: dict[str, Any] = {"scenario": scenario, "follow_up": follow_up, "miles_mismatch": listed}
            if ours is not None:
                miles_text = tito.apply_chat_template(msgs, tools=TOOLS, add_generation_prompt=False)
                try:
                    alike = ours.apply_chat_template(msgs, tools=TOOLS, add_generation_prompt=False) == miles_text
                except ValueError:
                    alike = False
                meta["deepseek_original_encoder_renders_alike"] = alike
            rows.append(
                {
                    "session_id": f"{family}-{i:03d}",
                    "family": family,
                    "messages": msgs,
                    "tools": TOOLS,
                    "token_ids": ids,
                    "metadata": meta,
                }
            )
        path = out / f"{family}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        hit = sum(bool(r["metadata"]["miles_mismatch"]) for r in rows)
        print(f"{family}: {len(rows)} sessions ({hit} with a mismatch) -> {path} [fixture {fixture}, miles {ref.miles_fingerprint()}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
