"""Generate an example capture file: every LLM call of a few agent sessions,
as an engine would log them (prompt ids from the family's render, the
completion ids the model generates, logprobs), with the events
`tito-fast assemble` must name:

- `plain`: an agent loop whose prompts extend each other (one chain);
- `retry`: a call sent again with the same prompt (rollback);
- `compaction`: the history replaced by a summary after a few turns (rewrite);
- `sub_agent`: calls of a helper with its own system prompt, interleaved with
  the main agent's (new root; the main chain stays open);
- `retokenized_seam`: the model sampled a token as two that decode to the
  same text; the next prompt re-encodes it canonically (seam drift,
  diagnosed as retokenization, realigned);
- `reasoning_dropped`: a chat where a new user message makes the template
  drop the earlier turn's reasoning (the history is rewritten).

`metadata.planted` labels each session; `metadata.agent` says which agent made a call.

Usage:
    python examples/make_calls.py --tokenizer fixture:qwen3 --family qwen3 --out examples/qwen3_calls.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from typing import Any

from tito_fast.chat.families import TitoTokenizer, get_tito_tokenizer
from tito_fast.tokenizer.load import load_tokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a command in the repository and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}, "timeout": {"type": "integer", "description": "seconds"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
]
WORDS = "the tests fail in parse because the input file has a trailing comma so we fix the reader and run again".split()


class Capture:
    def __init__(self, tito: TitoTokenizer, seed: int) -> None:
        self.tito, self.rng, self.rows = tito, random.Random(seed), []  # type: list[dict[str, Any]]

    def text(self, n: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(n))

    def reply(self, k: int, tool: bool = True) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.text(8), "reasoning_content": self.text(12)}
        if tool:
            args = json.dumps({"timeout": 60, "command": f"pytest -k case{k}"})
            msg["tool_calls"] = [{"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": args}}]
        return msg

    def call(self, session: str, history: list[dict[str, Any]], reply: dict[str, Any], agent: str, planted: str,
             completion: list[int] | None = None, prompt: list[int] | None = None) -> list[int]:  # fmt: skip
        tito = self.tito
        if prompt is None:
            prompt = tito.encode(tito.apply_chat_template(history, add_generation_prompt=True, tools=TOOLS))
        ids = completion if completion is not None else tito.completion_ids(history, reply, TOOLS)
        self.rows.append(
            {
                "session_id": session,
                "call_index": sum(1 for r in self.rows if r["session_id"] == session),
                "prompt_ids": prompt,
                "completion_ids": ids,
                "completion_logprobs": [round(-self.rng.random() * 3, 4) for _ in ids],
                "finish_reason": "tool_calls" if reply.get("tool_calls") else "stop",
                "messages": history,
                "tools": TOOLS,
                "response": reply,
                "metadata": {"agent": agent, "planted": planted},
            }
        )
        return ids

    def agent(self, session: str, planted: str, turns: int = 5) -> None:
        system = {"role": "system", "content": "You are a coding agent."}
        msgs: list[dict[str, Any]] = [system, {"role": "user", "content": "Fix the failing tests. " + self.text(10)}]
        helper: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a search helper. Answer with file names."},
            {"role": "user", "content": "Where is parse() defined?"},
        ]
        for k in range(turns):
            reply = self.reply(k)
            completion = None
            if planted == "retokenized_seam" and k == 2:
                completion = self._retokenized(msgs, reply)
            self.call(session, msgs, reply, "main", planted, completion)
            if planted == "retry" and k == 2:  # the same prompt again: the first answer was discarded
                reply = self.reply(100 + k)
                self.call(session, msgs, reply, "main", planted)
            msgs = [*msgs, reply, {"role": "tool", "tool_call_id": f"c{k}", "content": self.text(20)}]
            if planted == "compaction" and k == 2:  # the history so far becomes a summary
                msgs = [system, {"role": "user", "content": "Summary of the work so far: " + self.text(15)}]
            if planted == "sub_agent" and k in (1, 2):  # the helper runs between two main calls
                h_reply = self.reply(200 + k, tool=False)
                self.call(session, helper, h_reply, "helper", planted)
                helper = [*helper, h_reply, {"role": "user", "content": "And its tests?"}]

    def _retokenized(self, history: list[dict[str, Any]], reply: dict[str, Any]) -> list[int]:
        """The completion with one token near its end sampled as two that decode to the same text."""
        ids = self.tito.completion_ids(history, reply, TOOLS)
        tok = self.tito.tokenizer
        for at in range(len(ids) - 3, 0, -1):
            piece = tok.decode([ids[at]])
            if len(piece) >= 4 and piece.strip() == piece.lstrip():
                halves = tok.encode(piece[:2], add_special_tokens=False) + tok.encode(piece[2:], add_special_tokens=False)
                if tok.decode(halves) == piece and len(halves) == 2:
                    return [*ids[:at], *halves, *ids[at + 1 :]]
        raise RuntimeError("no token to split")

    def chat(self, session: str) -> None:
        """A chat whose prompts the engine renders with the tokenizer's own
        template, which drops an earlier turn's reasoning once a new user
        message follows it."""
        tok = self.tito.tokenizer
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "Explain the parser bug. " + self.text(6)}]
        for _ in range(3):
            reply = {"role": "assistant", "content": self.text(10), "reasoning_content": self.text(10)}
            text = tok.apply_chat_template(msgs, tools=TOOLS, add_generation_prompt=True, tokenize=False)
            self.call(session, msgs, reply, "main", "reasoning_dropped", prompt=self.tito.encode(text))
            msgs = [*msgs, reply, {"role": "user", "content": "Go on. " + self.text(5)}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", default="fixture:qwen3")
    ap.add_argument("--family", default="qwen3")
    ap.add_argument("--out", required=True)
    ns = ap.parse_args()
    tok = load_tokenizer(ns.tokenizer)
    tito = get_tito_tokenizer(tok, ns.family)
    cap = Capture(tito, seed=0)
    for planted in ("plain", "retry", "compaction", "sub_agent", "retokenized_seam"):
        cap.agent(f"{planted}-0", planted)
    cap.chat("reasoning_dropped-0")
    with open(ns.out, "w", encoding="utf-8") as f:
        for row in cap.rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(cap.rows)} calls of {len({r['session_id'] for r in cap.rows})} sessions to {ns.out}")


if __name__ == "__main__":
    main()
