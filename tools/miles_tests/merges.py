"""Miles' merges against tito_fast's, on tokenizers loaded as Miles loads them (by hand).

    MILES_DIR=<miles checkout> REF_TOKENIZERS=<folder of tokenizer folders> python tools/miles_tests/merges.py

For each family, both `merge_tokens` run on every split of tito_fast's
verify-template conversations (every role set, thinking on and off, one or
several tool calls per turn, every assistant-turn shape) with the same
tokenizer object, Miles' `load_tokenizer` result for that family; the ids
must be equal, or both must raise.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

# (the shared tool's tokenizer folder, family)
PAIRS = [
    ("qwen3", "qwen3"), ("qwen35", "qwen35"), ("qwen3", "qwennext"), ("glm47", "glm47"), ("minimax_m2", "minimax_m27"),
    ("minimax_m2", "minimax_m25"), ("deepseek_v32", "deepseekv32"), ("deepseek_v4", "deepseekv4"), ("qwen3", "nemotron3"),
    ("kimi_k2", "kimi25"), ("kimi_k2", "kimi26"), ("qwen3", "default"), ("glm47", "default"),
]


def main() -> int:
    path = Path(__file__).resolve().parents[3] / "shared" / "tools" / "miles_reference.py"
    spec = importlib.util.spec_from_file_location("miles_reference", path)
    assert spec is not None and spec.loader is not None
    ref = importlib.util.module_from_spec(spec)
    sys.modules["miles_reference"] = ref
    spec.loader.exec_module(ref)
    from tito_fast import get_tito_tokenizer
    from tito_fast.session.verify import ROLE_SETS, TOOLS, conversations

    bad = 0
    for folder, family in PAIRS:
        tok = ref.load_tokenizer(ref.tok_path(folder), family)
        miles, ours = ref.ref_tito_tokenizer(tok, family), get_tito_tokenizer(tok, family)
        checked = same = raised = 0
        for roles in ROLE_SETS:
            for thinking in (True, False):
                for parallel in (True, False):
                    for _, msgs in conversations(roles, parallel, thinking):
                        ends = [k + 1 for k, m in enumerate(msgs) if m["role"] == "assistant"]
                        for a, b in zip(ends, ends[1:]):
                            out: list[Any] = []
                            for tito in (miles, ours):
                                try:
                                    out.append(list(tito.merge_tokens(msgs[:a], msgs[: b - 1], [1, 2, 3], TOOLS)))
                                except Exception as e:  # both must raise, for any reason
                                    out.append(type(e))
                            checked += 1
                            both_raised = not isinstance(out[0], list) and not isinstance(out[1], list)
                            raised += not isinstance(out[0], list) or not isinstance(out[1], list)
                            same += both_raised or out[0] == out[1]
        bad += checked - same
        print(f"{family:12s} on {folder:12s}: {same}/{checked} merges identical ({raised} raised); tito_fast: {ours.template_source}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
