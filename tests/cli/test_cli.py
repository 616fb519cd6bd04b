"""The command line, called in-process as `cli(*args)`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tito_fast.cli.main import cli


def test_demo_finds_every_planted_fault(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "summary.json"
    assert cli("demo", "--sessions", "120", "--turns", "4", "--seed", "3", "--json", str(out)) == 0
    summary = json.loads(out.read_text())
    assert summary["sessions"] == 120 and summary["missed"] == 0 and summary["false_alarms"] == 0
    assert set(summary["planted"]) <= {"none", "retokenized", "missing_newline", "changed_content"}
    assert summary["found_mismatching"] == sum(v for k, v in summary["planted"].items() if k != "none")
    captured = capsys.readouterr()
    assert "planted faults missed" in captured.out
    assert "built 120/120 sessions" in captured.err  # progress, not a tty here


def test_json_to_stdout_and_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("demo", "--sessions", "10", "--turns", "2", "--quiet", "--json", "-") == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["sessions"] == 10
    assert captured.err == ""


def test_bad_arguments_exit_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("demo", "--turns", "1") == 2
    assert capsys.readouterr().err == "tito-fast: error: --sessions must be >= 1 and --turns >= 2\n"
    assert cli("demo", "--turns", "x") == 2
    assert "argument --turns: invalid int value" in capsys.readouterr().err


def test_console_script_and_module_entry_points() -> None:
    out = subprocess.run([sys.executable, "-m", "tito_fast", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("tito_fast ")


def test_verify_template_passes_and_fails_as_it_should(tmp_path: Any, capsys: Any) -> None:
    from tito_fast.cli.main import cli

    out = tmp_path / "v.json"
    # Miles' fixed template, named: read from the installed package.
    assert cli("verify-template", "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--template", "qwen3_fixed.jinja", "--json", str(out)) == 0
    text = capsys.readouterr().out
    assert "qwen3: 32 passed, 0 failed, 0 skipped" in text  # 3 role sets x 2 call layouts x conversations x thinking on/off
    assert "verified: --template qwen3_fixed.jinja (miles-tito-tokenizers" in text and "note:" not in text
    data = json.loads(out.read_text())
    assert data["family"] == "qwen3" and all(r["ok"] for r in data["results"]) and data["fixed_template"] is None
    # The tokenizer's stock template is what is verified without --template, never the fixed one in its
    # place: it fails (as Miles' verifier fails it), and the summary names the fixed template.
    assert cli("verify-template", "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--json", str(out)) == 1
    text = capsys.readouterr().out
    assert "qwen3: 6 passed, 26 failed, 0 skipped" in text and "verified: the tokenizer's own template" in text
    assert "qwen3_fixed.jinja" in text and "verify it with --template qwen3_fixed.jinja" in text
    data = json.loads(out.read_text())
    assert data["template"] == "the tokenizer's own template" and data["fixed_template"] == "qwen3_fixed.jinja" and not data["refused"]
    # Qwen3's own template cuts earlier reasoning: the default family fails, with the divergence decoded.
    assert cli("verify-template", "--tokenizer", "fixture:qwen3", "--family", "default") == 1
    text = capsys.readouterr().out
    assert "FAIL" in text and "<think>" in text and "26 failed" in text
    config = tmp_path / "fam.json"
    config.write_text(json.dumps({"name": "mine", "append_after": ["<|im_end|>", "\n"], "trailing": ["\n"]}))
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    assert cli("verify-template", "--tokenizer", "fixture:qwen3", "--family", str(config), "--template", str(template), "--quiet") == 0


def test_verify_template_derive_writes_a_family_usable_everywhere(tmp_path: Any, capsys: Any) -> None:
    from tito_fast.cli.main import cli

    out = tmp_path / "glm47.json"
    assert cli("verify-template", "--tokenizer", "fixture:glm51", "--derive", str(out)) == 0
    text = capsys.readouterr().out
    assert "TITO holds with this declaration" in text and "clear_thinking" in text
    declared = json.loads(out.read_text())
    assert declared["drop_last_if_in"] == ["<|observation|>", "<|user|>"] and declared["max_trim_tokens"] == 1
    assert cli("verify-template", "--tokenizer", "fixture:glm51", "--family", str(out), "--quiet") == 0  # usable as --family
    assert cli("score", str(Path(__file__).resolve().parents[2] / "examples" / "glm47_dump.jsonl"), "--tokenizer", "fixture:glm47", "--family", str(out), "--quiet") == 0
    broken = tmp_path / "t.jinja"  # earlier assistant turns elided: nothing makes it append-only
    broken.write_text("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' and not loop.last %}-"
                      "{% else %}{{ m.content or '' }}{% endif %}<|im_end|>\n{% endfor %}"
                      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    assert cli("verify-template", "--tokenizer", "fixture:qwen25", "--template", str(broken), "--derive", str(out)) == 1
    assert "TITO cannot hold with this template" in capsys.readouterr().out
    assert cli("verify-template", "--tokenizer", "fixture:qwen25", "--family", "qwen25", "--derive", str(out)) == 2


@pytest.mark.parametrize(("backend", "says"), [("native", "native (Rust"), ("jinja", "jinja2"), ("hf", "the tokenizer's apply_chat_template")])
def test_verify_template_backends_agree(backend: str, says: str, capsys: Any) -> None:
    assert cli("verify-template", "--tokenizer", "fixture:glm47", "--family", "glm47", "--backend", backend) == 0
    captured = capsys.readouterr()
    assert f"renderer: {says}" in captured.err and "glm47: 26 passed, 0 failed, 6 skipped" in captured.out


def test_verify_template_explains_deepseek_v3(capsys: Any) -> None:
    # DeepSeek V3's own template is not append-only under the reference's
    # synthetic-base merge (no TITO family registers it): verify-template must
    # say so, decoding where the merged ids leave the full render.
    assert cli("verify-template", "--tokenizer", "fixture:deepseek_v3", "--family", "default") == 1
    out = capsys.readouterr().out
    assert "default: 0 passed, 32 failed" in out
    assert "<｜tool▁outputs▁end｜>" in out and "RenderDiffError" in out


def test_verify_template_shows_what_the_family_would_refuse(tmp_path: Any, capsys: Any) -> None:
    from tito_fast.cli.main import cli
    from tito_fast.testing import fixtures

    stock = json.loads((fixtures.tokenizer_dir("qwen3") / "tokenizer_config.json").read_text())["chat_template"]
    path = tmp_path / "stock.jinja"
    path.write_text(stock)
    out = tmp_path / "v.json"
    assert cli("verify-template", "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--template", str(path), "--json", str(out)) == 1
    captured = capsys.readouterr()
    assert "refused when the family is built" in captured.err and "pip install 'tito_fast[miles]'" in captured.err
    data = json.loads(out.read_text())
    assert data["refused"] and data["template"] == f"--template {path}" and f"--template {path} does not render" in data["refused"]
    assert data["fixed_template"] == "qwen3_fixed.jinja"
    # Turns without reasoning break even tool-only appends with the stock template (a non-last turn loses its empty block).
    shapes = [r for r in data["results"] if r["conversation"].startswith("assistant shapes") and r["roles"] == ["tool"]]
    assert shapes and not any(r["ok"] for r in shapes if r["thinking"])


def test_verify_template_thinking_and_kwargs(capsys: Any) -> None:
    from tito_fast.cli.main import cli

    fixed = ("--template", "qwen3_fixed.jinja")
    assert cli("verify-template", "--tokenizer", "fixture:qwen3", "--family", "qwen3", *fixed, "--thinking", "off") == 0
    text = capsys.readouterr().out
    assert "qwen3: 16 passed, 0 failed, 0 skipped" in text and " on " not in text
    kwargs = '{"enable_thinking": false}'
    assert cli("verify-template", "--tokenizer", "fixture:qwen3", "--family", "qwen3", *fixed, "--thinking", "as-given",
               "--chat-template-kwargs", kwargs, "--quiet") == 0
    assert cli("verify-template", "--tokenizer", "fixture:qwen3", "--chat-template-kwargs", "[1]") == 2
    assert "must be a JSON object" in capsys.readouterr().err


def test_encoder_option(tmp_path: Any, capsys: Any) -> None:
    from tito_fast.cli.main import cli

    missing = str(tmp_path / "encoding_dsv32.py")
    assert cli("verify-template", "--tokenizer", "fixture:deepseek_v32", "--family", "deepseekv32", "--encoder", missing) == 2
    assert "no such file" in capsys.readouterr().err
    dump = tmp_path / "d.jsonl"
    dump.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}], "token_ids": [1, 2]}) + "\n")
    assert cli("score", str(dump), "--tokenizer", "fixture:deepseek_v32", "--family", "deepseekv32", "--encoder", missing) == 2
    assert "no such file" in capsys.readouterr().err
