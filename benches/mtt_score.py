"""The pipeline with miles-tito-tokenizers as a command, for
`bench_command_families`: what a Miles user runs to check a dump with the
PyPI package (load the tokenizer with transformers and put the family's
fixed template on it, as Miles does; render each session with the
package's `render_messages`, encode the whole text, compare with the
package's comparator).

Usage: python -m benches.mtt_score DUMP.jsonl FAMILY.json OUT.json

FAMILY.json as for `benches.reference_score`, plus `miles_type` (the
package's tokenizer type: qwen3, glm47, minimax_m27, or default).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    dump, family_file, out = argv
    from miles_tito_tokenizers.tokenizer_type import get_tito_tokenizer

    from benches.reference_score import family, records, write
    from tito_fast.testing import fixtures

    fam = family(family_file)
    tok = fixtures.load_tokenizer(fam["tokenizer"])
    if fam["chat_template"] is not None:
        tok.chat_template = fam["chat_template"]
    mtt = get_tito_tokenizer(tok, fam["miles_type"], chat_template_kwargs=fam["template_kwargs"], assistant_start_str=fam["assistant_start_str"])
    cmp = mtt.create_comparator()
    lists = []
    for rec in records(dump):
        text = mtt.render_messages(rec["messages"], add_generation_prompt=False, tools=rec.get("tools"))
        expected = tok.encode(text, add_special_tokens=False)
        lists.append([m.to_dict() for m in cmp.compare_sequences(expected, rec["token_ids"])])
    write(out, lists)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
