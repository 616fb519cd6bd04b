#!/usr/bin/env bash
# Install the built wheel into a fresh venv where no Rust toolchain is on
# PATH, then run the CLI on an example dump and the README's Python example
# there (`make wheel-check`). Usage: tools/check_wheel.sh DIST_DIR
set -euo pipefail
dist="${1:-dist}"
root="$(cd "$(dirname "$0")/.." && pwd)"
wheel="$(ls "$dist"/tito_fast-*-abi3-*manylinux*.whl | head -n 1)"
sdist="$(ls "$dist"/tito_fast-*.tar.gz | head -n 1)"
echo "wheel: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB); sdist: $(basename "$sdist") ($(du -k "$sdist" | cut -f1) KiB)"

check="$(mktemp -d)"
trap 'rm -rf "$check"' EXIT
python3 -m venv "$check/venv"
# A PATH without cargo, rustc or maturin: the wheel must install and run without them.
clean_path="$check/venv/bin:/usr/local/bin:/usr/bin:/bin"
for tool in cargo rustc maturin; do
    if PATH="$clean_path" command -v "$tool" >/dev/null 2>&1; then
        echo "check_wheel: $tool is on the clean PATH ($(PATH="$clean_path" command -v "$tool"))" >&2
        exit 1
    fi
done
env -i HOME="$HOME" PATH="$clean_path" PIP_CACHE_DIR="${PIP_CACHE_DIR:-$HOME/.cache/pip}" \
    "$check/venv/bin/python" -m pip install --quiet --only-binary=:all: "$wheel[score]"
cd "$check"  # away from the source tree: the installed package is what runs
env -i HOME="$HOME" PATH="$clean_path" "$check/venv/bin/tito-fast" score "$root/examples/qwen3_dump.jsonl" \
    --tokenizer fixture:qwen3 --family qwen3 --quiet --json "$check/summary.json"
env -i HOME="$HOME" PATH="$clean_path" "$check/venv/bin/python" - "$check/summary.json" "$root/README.md" <<'PY'
import json, re, sys
import tito_fast
assert "site-packages" in tito_fast.__file__, tito_fast.__file__
summary = json.load(open(sys.argv[1]))["summary"]
assert summary["sessions"] == 40, summary["sessions"]
readme = open(sys.argv[2], encoding="utf-8").read()
example = re.search(r"## In Python\n\n```python\n(.*?)```", readme, re.S).group(1)
exec(compile(example, "README.md (In Python)", "exec"), {})
print(f"wheel check: tito-fast score on examples/qwen3_dump.jsonl: {summary['sessions']} sessions; README example ran")
PY
