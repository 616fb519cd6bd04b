"""Every problem a user can make is one line, `tito-fast: error: ...`, with a
documented exit code and no traceback; outputs are checked before any work."""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tito_fast.cli.main import EXIT_CODES, cli
from tito_fast.errors import Terminated

score_job = importlib.import_module("tito_fast.score.files")  # the score job the command line calls

ROOT = Path(__file__).resolve().parents[2]
DUMP = ROOT / "examples" / "qwen3_dump.jsonl"


def _run(*args: str, cwd: Path = ROOT) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSFORMERS_")}
    out = subprocess.run(
        [sys.executable, "-m", "tito_fast", *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env
    )
    return out.returncode, out.stdout, out.stderr


def _one_error(err: str) -> str:
    """The stderr of a failed run: exactly one `tito-fast: error:` line, no traceback."""
    lines = [x for x in err.splitlines() if x.strip()]
    assert "Traceback" not in err, err
    errors = [x for x in lines if x.startswith("tito-fast: error: ")]
    assert len(errors) == 1, err
    return errors[0]


def _first_rows(n: int) -> list[dict[str, Any]]:
    return [json.loads(x) for x in DUMP.read_text(encoding="utf-8").splitlines()[:n]]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cli_errors")
    out = {"dir": d}
    out["as_parquet"] = d / "rows.parquet"
    out["as_parquet"].write_text(DUMP.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    out["empty"] = d / "empty.jsonl"
    out["empty"].write_text("\n\n", encoding="utf-8")
    out["cols"] = d / "cols.parquet"
    pq.write_table(pa.table({"session_id": ["a", "b"], "messages": ["[]", "[]"]}), out["cols"])
    out["no_tok"] = d / "no_tokenizer"
    out["no_tok"].mkdir()
    (out["no_tok"] / "README").write_text("nothing here")
    ok = d / "ok.json"
    ok.write_text("[151644, 872, 198]")
    out["ok"] = ok
    for name, text in {
        "float": "[151644, 872.9]",
        "bool": "[151644, true]",
        "string": '[151644, "198"]',
        "negative": "[151644, -5]",
        "bad_json": "[151644, 872",
        "unterminated": '{"token_ids": "abc',
    }.items():
        (d / f"{name}.json").write_text(text)
        out[name] = d / f"{name}.json"
    return out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["score", "NOPE.jsonl", "--tokenizer", "fixture:qwen3"], "NOPE.jsonl: no such file"),
        (["score", str(DUMP), "--tokenizer", "/no/such/tokenizer"], "tokenizer folder '/no/such/tokenizer' does not exist"),
        (["score", str(DUMP), "--tokenizer", "fixture:nosuch"], "no tokenizer fixture 'nosuch'; fixtures: "),
        (["score", str(DUMP), "--tokenizer", "fixture:qwen3", "--family", "nosuch"], "unknown family; families: "),
        (["score", str(DUMP), "--tokenizer", "fixture:qwen3", "--metric-version", "v3"], "invalid choice: 'v3'"),
        (["score", str(DUMP), "--tokenizer", "fixture:qwen3", "--report", "/no/such/dir/r.html"], "the folder /no/such/dir does not exist"),
        (["score", str(DUMP), "--tokenizer", "fixture:qwen3", "--out", "r.csv"], "name it .jsonl or .parquet"),
        (["score", str(DUMP), "--tokenizer", "fixture:qwen3", "--workers", "0"], "--workers: must be >= 1"),
        (["diff", "NOPE.json", "NOPE2.json", "--tokenizer", "fixture:qwen3"], "NOPE.json: no such file"),
    ],
)
def test_input_errors_are_one_line(args: list[str], words: str) -> None:
    code, out, err = _run(*args)
    assert code == EXIT_CODES["input"] == 2
    assert words in _one_error(err)
    assert "records" not in err  # nothing was scored: checked first
    assert "PyTorch was not found" not in err


def test_file_problems(files: dict[str, Path]) -> None:
    code, _, err = _run("score", str(files["no_tok"] / ".."), "--tokenizer", str(files["no_tok"]))
    assert code == 2 and "..: is a folder, not a file" in _one_error(err)
    odd = files["dir"] / "rows.txt"
    odd.write_text("{}\n", encoding="utf-8")
    code, _, err = _run("score", str(odd), "--tokenizer", "fixture:qwen3")
    assert code == 2 and "rows.txt: unknown dump format" in _one_error(err)
    code, _, err = _run("score", str(DUMP), "--tokenizer", str(files["no_tok"]))
    assert code == 2 and "holds no tokenizer files" in _one_error(err)
    code, _, err = _run("score", str(files["as_parquet"]), "--tokenizer", "fixture:qwen3")
    assert code == 2 and "named .parquet but not a Parquet file; it looks like JSON lines" in _one_error(err)


@pytest.mark.parametrize("extra", [[], ["--ci"], ["--on-error", "skip"]])
def test_an_empty_dump_is_an_error(files: dict[str, Path], extra: list[str]) -> None:
    code, _, err = _run("score", str(files["empty"]), "--tokenizer", "fixture:qwen3", "--family", "qwen3", *extra)
    assert code == 2 and "holds no records" in _one_error(err)


def test_a_missing_parquet_column_is_one_error(files: dict[str, Path]) -> None:
    code, _, err = _run("score", str(files["cols"]), "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--on-error", "skip")
    assert code == 2 and "no column(s) ['token_ids']" in _one_error(err)
    assert "bad record" not in err


@pytest.mark.parametrize("flag", ["--json", "--report", "--markdown", "--out"])
def test_an_output_that_is_the_input_is_refused(tmp_path: Path, flag: str) -> None:
    dump = tmp_path / "dump.jsonl"
    dump.write_text(DUMP.read_text(encoding="utf-8"), encoding="utf-8")
    before = dump.read_bytes()
    code, _, err = _run("score", str(dump), "--tokenizer", "fixture:qwen3", flag, str(dump), cwd=tmp_path)
    assert code == 2 and "is an input of this run" in _one_error(err)
    assert dump.read_bytes() == before
    # also through another spelling of the same path
    code, _, err = _run("score", "dump.jsonl", "--tokenizer", "fixture:qwen3", flag, "./sub/../dump.jsonl", cwd=tmp_path)
    assert code == 2 and dump.read_bytes() == before


def test_two_outputs_naming_one_file_are_refused(tmp_path: Path) -> None:
    code, _, err = _run("score", str(DUMP), "--tokenizer", "fixture:qwen3", "--json", str(tmp_path / "a"), "--markdown", str(tmp_path / "a"))
    assert code == 2 and "writes the same file" in _one_error(err)


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("float", "item 1 is 872.9 (float); token ids are integers"),
        ("bool", "item 1 is true (bool)"),
        ("string", 'item 1 is "198" (str)'),
        ("negative", "item 1 is -5; token ids are in [0, 2**32-1]"),
        ("bad_json", "invalid JSON: Expecting ',' delimiter"),
        ("unterminated", "invalid JSON: Unterminated string starting at column 15"),
    ],
)
def test_diff_rejects_what_the_score_job_rejects(files: dict[str, Path], name: str, words: str) -> None:
    code, _, err = _run("diff", str(files[name]), str(files["ok"]), "--tokenizer", "fixture:qwen3", "--family", "qwen3")
    assert code == 2 and words in _one_error(err)


def test_diff_with_the_wrong_family(files: dict[str, Path]) -> None:
    code, _, err = _run("diff", str(files["ok"]), str(files["ok"]), "--tokenizer", "fixture:qwen3", "--family", "glm47")
    line = _one_error(err)
    assert code == 2 and "is not one token of this tokenizer" in line and "is the family right" in line


def test_family_is_inferred_or_asked_for(tmp_path: Path) -> None:
    rows = _first_rows(3)
    named = tmp_path / "named.jsonl"
    named.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    code, _, err = _run("score", str(named), "--tokenizer", "fixture:qwen3", "--quiet")
    assert code == 0
    unnamed = tmp_path / "unnamed.jsonl"
    unnamed.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "family"}) + "\n" for r in rows), encoding="utf-8")
    code, _, err = _run("score", str(unnamed), "--tokenizer", "fixture:qwen3")
    assert code == 0 and "tito-fast: family 'qwen3': its chat template is Qwen3's stock template" in err
    assert "PyTorch was not found" not in err and "tokenizer_class" not in err  # transformers' start-up noise
    code, _, err = _run("score", str(unnamed), "--tokenizer", "fixture:deepseek_v3")
    line = _one_error(err)
    assert code == 2 and "give --family" in line and "qwen3" in line and "glm47" in line


def test_progress_agrees_with_the_counts(tmp_path: Path) -> None:
    rows = _first_rows(10)
    lines = [json.dumps(r) for r in rows]
    lines[3] = "{not json"
    lines[7] = json.dumps({"messages": []})
    dump = tmp_path / "some_bad.jsonl"
    dump.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, err = _run("score", str(dump), "--tokenizer", "fixture:qwen3", "--on-error", "skip")
    assert code == 0 and "Traceback" not in err
    assert "read 10/10 records" in err
    assert re.search(r"^sessions scored +8$", out, re.M) and re.search(r"^bad records +2$", out, re.M)
    assert re.search(r"^records read +10 of 10$", out, re.M)  # 8 + 2, as the progress said
    assert "skipped 2 bad record(s), the first some_bad.jsonl:4" in err


def test_no_per_session_time_when_nothing_was_scored(tmp_path: Path) -> None:
    dump = tmp_path / "all_bad.jsonl"
    dump.write_text('{"messages": []}\n{"token_ids": [1]}\n', encoding="utf-8")
    code, out, err = _run("score", str(dump), "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--on-error", "skip")
    assert code == 0
    assert "no session scored" in out and "a record (" not in out
    assert "No session was scored. 2 bad record(s)." in out


def test_an_internal_error_is_a_bug_report_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(score_job, "iter_score", broken)
    assert cli("score", str(DUMP), "--tokenizer", "fixture:qwen3") == EXIT_CODES["bug"] == 3
    err = capsys.readouterr().err
    assert err.startswith("tito-fast: internal error: RuntimeError: something broke; this is a bug") and "Traceback" not in err
    assert cli("score", str(DUMP), "--tokenizer", "fixture:qwen3", "--debug") == 3
    assert "Traceback" in capsys.readouterr().err


def test_an_interrupt_exits_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(score_job, "iter_score", interrupted)
    assert cli("score", str(DUMP), "--tokenizer", "fixture:qwen3") == EXIT_CODES["interrupted"] == 130
    assert "tito-fast: interrupted" in capsys.readouterr().err


def test_a_terminate_exits_143(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def terminated(*args: Any, **kwargs: Any) -> Any:
        raise Terminated(signal.SIGTERM)

    monkeypatch.setattr(score_job, "iter_score", terminated)
    assert cli("score", str(DUMP), "--tokenizer", "fixture:qwen3") == EXIT_CODES["terminated"] == 143
    assert "tito-fast: terminated (SIGTERM)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "flag", "name"),
    [
        ("score", "--json", "out"),
        ("score", "--report", "out"),
        ("score", "--markdown", "out"),
        ("score", "--out", "rows.jsonl"),
        ("assemble", "--out", "chains.parquet"),
        ("assemble", "--json", "out"),
        ("assemble", "--report", "out"),
    ],
)
def test_a_folder_as_output_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, flag: str, name: str
) -> None:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "keep").write_text("kept")
    source = DUMP if command == "score" else ROOT / "examples" / "qwen3_calls.jsonl"
    assert cli(command, str(source), "--tokenizer", "fixture:qwen3", flag, str(folder)) == EXIT_CODES["input"] == 2
    assert _one_error(capsys.readouterr().err) == f"tito-fast: error: {flag} {folder}: is a folder; give a file name"
    assert folder.is_dir() and [p.name for p in folder.iterdir()] == ["keep"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary file


def test_help_and_version_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("--version") == 0 and capsys.readouterr().out.startswith("tito_fast ")
    assert cli("score", "--help") == 0 and "--metric-version {v1,v2}" in capsys.readouterr().out
