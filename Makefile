# Named entry points; the README and CI call these.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: example demo test verify-templates docs wheel wheel-check bench dev lint clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

## example: build + install (release), then score the shipped example dumps (reports in example-report/)
example: $(BIN)/python
	$(BIN)/python -m pip install --quiet '.[score]'
	mkdir -p example-report
	$(BIN)/tito-fast score examples/qwen3_dump.jsonl --tokenizer fixture:qwen3 --family qwen3 \
		--report example-report/qwen3.html --markdown example-report/qwen3.md --json example-report/qwen3.json
	$(BIN)/tito-fast score examples/glm47_dump.jsonl --tokenizer fixture:glm47 --family glm47 \
		--report example-report/glm47.html --markdown example-report/glm47.md --json example-report/glm47.json
	$(BIN)/tito-fast assemble examples/qwen3_calls.jsonl --tokenizer fixture:qwen3 --family qwen3 \
		--out example-report/qwen3_chains.parquet --report example-report/qwen3_chains.html --json example-report/qwen3_chains.json
	@echo "reports: example-report/qwen3.html example-report/glm47.html"

## demo: build and install tito_fast (release), then find planted faults in generated sessions
demo: $(BIN)/python
	$(BIN)/python -m pip install --quiet .
	$(BIN)/tito-fast demo

## test: Rust tests, then install with the test extras and run every Python test (benches run once each)
test: $(BIN)/python
	cargo test --locked
	$(BIN)/python -m pip install --quiet '.[test]'
	$(BIN)/python -m pytest

## verify-templates: `tito-fast verify-template` for every fixture tokenizer with its family (run by CI)
# TOKENIZER:FAMILY verifies the tokenizer's own template (or the family's DeepSeek encoder);
# TOKENIZER:FAMILY:FIXED verifies Miles' fixed template FIXED (what Miles' load_tokenizer installs
# for the family), since verify-template verifies the template it is given, never a substitute:
# the stock Qwen3, Qwen3.5 and MiniMax-M2 templates are not append-only and fail, as in Miles' verifier.
VERIFY_PAIRS = qwen3:qwen3:qwen3_fixed.jinja qwen3:qwennext:qwen3_thinking_2507_and_next_fixed.jinja \
	qwen35:qwen35:qwen3.5_fixed.jinja qwen25:qwen25 glm47:glm47 glm5:glm47 glm51:glm47 glm52:glm47 minimax_m27:minimax_m27:minimax_m27_fixed.jinja \
	minimax_m27:minimax_m25:minimax_m25_fixed.jinja minimax_m3:minimax_m27 llama31:llama3 kimi_k2:kimi25 kimi_k2:kimi25:kimi_k25_fixed.jinja \
	deepseek_v32:deepseekv32 deepseek_v4:deepseekv4 nemotron3:nemotron3 devstral:mistral
verify-templates: $(BIN)/python
	$(BIN)/python -m pip install --quiet '.[test]'
	@set -e; for spec in $(VERIFY_PAIRS); do \
		tok=$${spec%%:*}; rest=$${spec#*:}; family=$${rest%%:*}; fixed=$${rest#"$$family"}; fixed=$${fixed#:}; \
		echo "== verify-template $$tok --family $$family$${fixed:+ --template $$fixed}"; \
		$(BIN)/tito-fast verify-template --tokenizer fixture:$$tok --family $$family $${fixed:+--template $$fixed}; \
	done

## docs: build the manual (docs/, mkdocs with the material theme) into site/; --strict fails on broken links
docs: $(BIN)/python
	$(BIN)/python -m pip install --quiet '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

## wheel: an abi3 manylinux wheel and an sdist in dist/ (maturin, with zig from PyPI as the linker)
wheel: $(BIN)/python
	$(BIN)/python -m pip install --quiet 'maturin>=1.9,<2' 'ziglang>=0.13'
	rm -rf dist
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/maturin build --release --zig --compatibility manylinux2014 --interpreter $(BIN)/python --out dist
	$(BIN)/maturin sdist --out dist

## wheel-check: install the wheel in a fresh venv without cargo on PATH; run the CLI and the README example there
wheel-check: wheel
	tools/check_wheel.sh dist

## bench: full-size benchmarks on a release build; writes bench-results/ and prints the README table
bench: $(BIN)/python
	$(BIN)/python -m pip install --quiet '.[test]'
	mkdir -p bench-results
	$(BIN)/python -m pytest benches --benchmark-enable --benchmark-json=bench-results/latest.json
	$(BIN)/python -m benches.report bench-results/latest.json

## dev: editable debug build for fast iteration (benchmarks refuse to run on it)
dev: $(BIN)/python
	$(BIN)/python -m pip install --quiet maturin '.[test]'
	$(BIN)/maturin develop

lint:
	cargo clippy --all-targets -- -D warnings
	cargo clippy --features python --lib -- -D warnings

clean:
	rm -rf target dist $(VENV) bench-results example-report site .pytest_cache .hypothesis .benchmarks
