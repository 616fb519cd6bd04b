"""The reference pipeline as a command, for `bench_command`: what a team
runs without tito_fast to check a dump (load the tokenizer with
transformers, render each session's messages with the family's template,
encode the whole text, compare with the reference's comparator).

Usage: python -m benches.reference_score DUMP.jsonl FAMILY.json OUT.json

FAMILY.json holds the family's constants as a user of the reference has
them (fixture tokenizer name, chat template, template kwargs, boundary ids,
trailing ids, assistant start); OUT.json gets each session's mismatch list.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any


def main(argv: list[str]) -> int:
    dump, family_file, out = argv
    from tito_fast.testing import fixtures
    from tito_fast.testing.reference import ReferenceComparator, ReferenceTito

    fam = family(family_file)
    tok = fixtures.load_tokenizer(fam["tokenizer"])
    render = ReferenceTito(tok, template_kwargs=fam["template_kwargs"], chat_template=fam["chat_template"])
    cmp = ReferenceComparator(
        tok, fam["assistant_start_str"], special_token_ids=fam["special_token_ids"], trim_trailing_ids=fam["trailing_token_ids"] or None
    )
    lists = []
    for rec in records(dump):
        text = render.render(rec["messages"], rec.get("tools"), False)
        expected = tok.encode(text, add_special_tokens=False)
        lists.append(cmp.compare(expected, rec["token_ids"]))
    write(out, lists)
    return 0


def family(path: str) -> dict[str, Any]:
    """The family's constants (FAMILY.json)."""
    with open(path, encoding="utf-8") as f:
        return dict(json.load(f))


def records(dump: str) -> Iterator[dict[str, Any]]:
    """The dump's records, one per non-blank JSONL line."""
    with open(dump, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def write(out: str, lists: list[Any]) -> None:
    with open(out, "w", encoding="utf-8") as f:
        json.dump(lists, f)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
