"""Stopping is clean: SIGTERM ends `score` (with workers too) and `assemble` as
Ctrl-C does, with 143 for 130, the reports written and marked INCOMPLETE and
no temporary file left; workers end with their parent however it ends; a
killed worker is reported as such. Outputs are written whole, and a device
or a FIFO in place, never replaced."""

from __future__ import annotations

import importlib
import io
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tito_fast.cli.main import EXIT_CODES, cli
from tito_fast.errors import Terminated
from tito_fast.score.dump import BadRecord
from tito_fast.score.outputs import Output, discard_pending, write_text
from tito_fast.score.results import ResultWriter, read_results

score_job = importlib.import_module("tito_fast.score.files")  # the score job the command line calls

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="signals, FIFOs, /proc and forked workers as on Linux")

ROOT = Path(__file__).resolve().parents[2]
DUMP = ROOT / "examples" / "qwen3_dump.jsonl"
CALLS = ROOT / "examples" / "qwen3_calls.jsonl"
MODEL = ["--tokenizer", "fixture:qwen3", "--family", "qwen3"]


def _repeat(src: Path, dst: Path, times: int) -> Path:
    """`src`'s records `times` over, each copy with its own session ids."""
    rows = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    with open(dst, "w", encoding="utf-8") as f:
        for k in range(times):
            for i, row in enumerate(rows):
                f.write(json.dumps({**row, "session_id": f"r{k}-{row.get('session_id', i)}"}) + "\n")
    return dst


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A dump of 4,000 records and a capture of 4,650 calls: seconds of work, still running when signalled."""
    d = tmp_path_factory.mktemp("signals")
    return {"dump": _repeat(DUMP, d / "dump.jsonl", 100), "calls": _repeat(CALLS, d / "calls.jsonl", 150)}


class Run:
    """`tito-fast ARGS` in a subprocess (its own session), stderr in a file to poll."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSFORMERS_")}
        with open(log, "w", encoding="utf-8") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tito_fast", *args], stdout=subprocess.DEVNULL, stderr=err, env=env,
                start_new_session=True,
            )  # fmt: skip
        self.pid = self.proc.pid

    @property
    def err(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def wait_until(self, what: Callable[[], bool], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            assert self.proc.poll() is None, f"it ended ({self.proc.returncode}) first:\n{self.err}"
            assert time.monotonic() < deadline, f"timed out:\n{self.err}"
            time.sleep(0.02)

    def scoring(self, workers: int = 1) -> set[int]:
        """Wait until records are being scored (the first progress line) and the workers are up; their pids."""
        self.wait_until(lambda: "records" in self.err and len(_children(self.pid)) >= (workers if workers > 1 else 0))
        return _children(self.pid) if workers > 1 else set()

    def wait(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    runs: list[Run] = []

    def go(*args: str) -> Run:
        runs.append(Run(list(args), tmp_path / f"stderr{len(runs)}.txt"))
        return runs[-1]

    yield go
    for r in runs:  # a failed test leaves nothing running
        for pid in {r.pid} | _children(r.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        r.proc.wait(30)


def _children(pid: int) -> set[int]:
    """The child processes of `pid`: /proc/PID/task/*/children, else `pgrep -P`."""
    task = Path(f"/proc/{pid}/task")
    files = list(task.glob("*/children"))
    if files:
        found: set[int] = set()
        for f in files:
            try:
                found |= {int(x) for x in f.read_text().split()}
            except OSError:  # a thread that just ended
                pass
        return found
    if not task.exists():
        return set()
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return {int(x) for x in out.stdout.split()}


def _gone(pid: int) -> bool:
    """Ended: no such process, or a zombie nobody has reaped yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _all_gone(pids: set[int], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not all(_gone(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _score_outputs(out: Path, rows: str) -> list[str]:
    files = {"--out": rows, "--json": "x.json", "--report": "x.html", "--markdown": "x.md"}
    return [x for flag, name in files.items() for x in (flag, str(out / name))]


def _check_incomplete(out: Path, rows: str, stopped_at: Callable[[str], bool]) -> dict[str, Any]:
    """Every output there, whole and marked INCOMPLETE, and nothing else in the folder (no temporary file)."""
    assert sorted(p.name for p in out.iterdir()) == sorted([rows, "x.html", "x.json", "x.md"])
    data: dict[str, Any] = json.loads((out / "x.json").read_text(encoding="utf-8"))
    summary = data["summary"]
    assert summary["complete"] is False and stopped_at(summary["stopped_at"]), summary["stopped_at"]
    assert 0 < len(data["sessions"]) < 4000
    assert "INCOMPLETE" in (out / "x.html").read_text(encoding="utf-8")
    assert "INCOMPLETE" in (out / "x.md").read_text(encoding="utf-8")
    kept = read_results(out / rows)  # the rows so far, each whole
    assert len(kept) >= len(data["sessions"])
    if rows.endswith(".parquet"):
        assert pq.read_metadata(out / rows).metadata[b"tito_fast.complete"] == b"false"
    return data


@pytest.mark.parametrize(
    ("workers", "to", "rows"), [(1, "parent", "r.jsonl"), (2, "parent", "r.parquet"), (2, "group", "r.jsonl")]
)
def test_sigterm_stops_score_cleanly(
    start: Callable[..., Run], big: dict[str, Path], tmp_path: Path, workers: int, to: str, rows: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    run = start("score", str(big["dump"]), *MODEL, "--workers", str(workers), *_score_outputs(out, rows))
    pids = run.scoring(workers)
    if to == "group":  # as Slurm signals a job step's processes
        os.killpg(run.pid, signal.SIGTERM)
    else:  # as Kubernetes and Ray signal a container's or worker's main process
        os.kill(run.pid, signal.SIGTERM)
    assert run.wait() == EXIT_CODES["terminated"] == 143, run.err
    assert "tito-fast: terminated (SIGTERM); the reports written below are marked INCOMPLETE" in run.err
    assert "Traceback" not in run.err
    _check_incomplete(out, rows, lambda s: s == "interrupted")
    assert _all_gone(pids), [p for p in pids if not _gone(p)]


def test_ctrl_c_still_exits_130(start: Callable[..., Run], big: dict[str, Path], tmp_path: Path) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        pytest.skip("SIGINT is ignored here, and so in the child")
    out = tmp_path / "out"
    out.mkdir()
    run = start("score", str(big["dump"]), *MODEL, "--workers", "2", *_score_outputs(out, "r.jsonl"))
    pids = run.scoring(2)
    os.killpg(run.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group; the workers leave it to the parent
    assert run.wait() == EXIT_CODES["interrupted"] == 130, run.err
    assert "tito-fast: interrupted; the reports written below are marked INCOMPLETE" in run.err
    assert "Traceback" not in run.err and "KeyboardInterrupt" not in run.err
    _check_incomplete(out, "r.jsonl", lambda s: s == "interrupted")
    assert _all_gone(pids)


def test_workers_end_when_the_parent_is_killed(start: Callable[..., Run], big: dict[str, Path], tmp_path: Path) -> None:
    run = start("score", str(big["dump"]), *MODEL, "--workers", "2", "--json", str(tmp_path / "x.json"))
    pids = run.scoring(2)
    assert len(pids) == 2
    os.kill(run.pid, signal.SIGKILL)
    assert run.wait() == -signal.SIGKILL
    assert _all_gone(pids, timeout=5.0), [p for p in pids if not _gone(p)]


def test_a_killed_worker_is_reported(start: Callable[..., Run], big: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    run = start("score", str(big["dump"]), *MODEL, "--workers", "2", *_score_outputs(out, "r.parquet"))
    pids = run.scoring(2)
    os.kill(min(pids), signal.SIGKILL)  # as the out-of-memory killer does
    assert run.wait() == EXIT_CODES["bug"] == 3, run.err
    assert "tito-fast: error: a worker died: signal 9 (SIGKILL); the reports written below are marked INCOMPLETE" in run.err
    assert "bug" not in run.err and "Traceback" not in run.err and "BrokenProcessPool" not in run.err
    data = _check_incomplete(out, "r.parquet", lambda s: s.startswith("a worker's death: signal 9"))
    assert data["summary"]["sessions"] == len(data["sessions"])  # the results so far, kept
    assert _all_gone(pids)


@pytest.mark.parametrize(("signum", "code", "said"), [(signal.SIGTERM, 143, "terminated (SIGTERM)"), (signal.SIGINT, 130, "interrupted")])
def test_sigterm_stops_assemble_cleanly(
    start: Callable[..., Run], big: dict[str, Path], tmp_path: Path, signum: int, code: int, said: str
) -> None:
    if signum == signal.SIGINT and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        pytest.skip("SIGINT is ignored here, and so in the child")
    out = tmp_path / "out"
    out.mkdir()
    run = start(
        "assemble", str(big["calls"]), *MODEL, "--out", str(out / "c.parquet"), "--json", str(out / "c.json"),
        "--report", str(out / "c.html"),
    )  # fmt: skip
    fd = Path(f"/proc/{run.pid}/fd")

    def reading() -> bool:
        try:
            return any(os.readlink(p) == str(big["calls"]) for p in fd.iterdir())
        except OSError:
            return False

    run.wait_until(reading)
    os.kill(run.pid, signum)
    assert run.wait() == code, run.err
    assert f"tito-fast: {said}" in run.err and "Traceback" not in run.err
    assert list(out.iterdir()) == []  # no output, and no temporary file


def test_an_interrupt_while_chains_are_written_leaves_no_parquet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def half(table: Any, where: Any, **kwargs: Any) -> None:  # Ctrl-C lands with half the file written
        with open(where, "wb") as f:
            f.write(b"PAR1" + b"\0" * 1000)
        raise KeyboardInterrupt

    monkeypatch.setattr(pq, "write_table", half)
    out = tmp_path / "out"
    out.mkdir()
    assert cli("assemble", str(CALLS), *MODEL, "--out", str(out / "c.parquet"), "--json", str(out / "c.json"), "--quiet") == 130
    assert "tito-fast: interrupted" in capsys.readouterr().err
    assert list(out.iterdir()) == []  # no partial Parquet under its name (it has no completeness marker), no temporary


def test_sigterm_in_process_is_an_interrupt(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # another library (Ray) may have set its own
    try:
        _sigterm_in_process(monkeypatch, capsys)
    finally:
        signal.signal(signal.SIGTERM, before)


def _sigterm_in_process(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:

    def terminated(*args: Any, **kwargs: Any) -> Any:
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # else the signal below ends pytest
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
        raise AssertionError("SIGTERM did not stop the run")

    monkeypatch.setattr(score_job, "iter_score", terminated)
    assert cli("score", str(DUMP), *MODEL) == 143
    assert "tito-fast: terminated (SIGTERM)" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back


def test_a_stop_between_two_results_is_the_same_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Stopped(ResultWriter):  # SIGTERM lands while a result is written, not while the stream scores
        def write(self, res: Any) -> None:
            if self.rows == 4:
                raise Terminated(signal.SIGTERM)
            super().write(res)

    monkeypatch.setattr(score_job, "ResultWriter", Stopped)
    rows, js, html = tmp_path / "r.jsonl", tmp_path / "x.json", tmp_path / "x.html"
    code = cli("score", str(DUMP), *MODEL, "--out", str(rows), "--json", str(js), "--report", str(html), "--quiet")
    assert code == 143
    assert "terminated (SIGTERM); the reports written below are marked INCOMPLETE" in capsys.readouterr().err
    data = json.loads(js.read_text(encoding="utf-8"))
    assert data["summary"]["complete"] is False and data["summary"]["stopped_at"] == "interrupted"
    assert len(read_results(rows)) == len(data["sessions"]) == 4
    assert "INCOMPLETE" in html.read_text(encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl", "x.html", "x.json"]


_WORKER = """
import multiprocessing, os, sys, threading, time
from tito_fast.score.stopping import become_worker

def work(parent, q):
    q.put(become_worker(parent))
    time.sleep(120)

if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1])
    q = ctx.Queue()
    p = ctx.Process(target=work, args=(os.getpid(), q))
    if sys.argv[2] == "thread":  # forked by a thread that then ends
        t = threading.Thread(target=p.start)
        t.start()
        t.join()
    else:
        p.start()
    how = q.get(timeout=120)
    time.sleep(0.3)
    print(p.pid, how, p.is_alive(), flush=True)
    time.sleep(120)
"""


@pytest.mark.parametrize(
    ("context", "by", "how"), [("fork", "main", "pdeathsig"), ("fork", "thread", "watcher"), ("spawn", "main", "watcher")]
)
def test_a_worker_ends_with_its_parent(tmp_path: Path, context: str, by: str, how: str) -> None:
    script = tmp_path / "parent.py"
    script.write_text(_WORKER, encoding="utf-8")
    with subprocess.Popen([sys.executable, str(script), context, by], stdout=subprocess.PIPE, text=True) as parent:
        try:
            assert parent.stdout is not None
            pid, got, alive = parent.stdout.readline().split()
            assert (got, alive) == (how, "True")  # alive after the thread that forked it ended
        finally:
            parent.kill()  # SIGKILL: nothing of the parent's runs
    assert _all_gone({int(pid)}, timeout=5.0)


def test_become_worker_leaves_sigint_to_the_parent() -> None:
    code = (
        "import os, signal; from tito_fast.score.stopping import become_worker; "
        "become_worker(os.getppid()); print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN, "
        "signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "True"], out.stderr


# -- outputs: whole or nothing; a device or FIFO in place; a folder refused ----


def _read_fifo(path: Path) -> tuple[threading.Thread, io.BytesIO]:
    got = io.BytesIO()

    def read() -> None:
        with open(path, "rb") as f:
            got.write(f.read())

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t, got


def _finish(t: threading.Thread, path: Path) -> None:
    t.join(60)
    if t.is_alive():  # the writer never came: let the reader go
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        t.join(10)
        pytest.fail(f"nothing was written to {path}")


def test_fifos_are_written_in_place(tmp_path: Path) -> None:
    html, js = tmp_path / "report.html", tmp_path / "out.json"
    os.mkfifo(html)
    os.mkfifo(js)
    readers = [_read_fifo(html), _read_fifo(js)]
    assert cli("score", str(DUMP), *MODEL, "--report", str(html), "--json", str(js), "--quiet") == 0
    for (t, _), p in zip(readers, (html, js)):
        _finish(t, p)
    assert readers[0][1].getvalue().startswith(b"<!doctype html>")
    assert json.loads(readers[1][1].getvalue())["summary"]["complete"] is True
    assert all(stat.S_ISFIFO(p.stat().st_mode) for p in (html, js))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "report.html"]


def test_assemble_writes_parquet_into_a_fifo(tmp_path: Path) -> None:
    chains = tmp_path / "chains.parquet"
    os.mkfifo(chains)
    t, got = _read_fifo(chains)
    assert cli("assemble", str(CALLS), *MODEL, "--out", str(chains), "--quiet") == 0
    _finish(t, chains)
    table = pq.read_table(pa.BufferReader(got.getvalue()))
    assert table.num_rows > 0 and "loss_mask" in table.column_names
    assert stat.S_ISFIFO(chains.stat().st_mode) and [p.name for p in tmp_path.iterdir()] == ["chains.parquet"]


def test_dev_null_stays_a_device() -> None:
    before = os.stat(os.devnull)
    if not stat.S_ISCHR(before.st_mode):
        pytest.skip(f"{os.devnull} is not a character device here")
    args = ["--report", os.devnull, "--json", os.devnull, "--markdown", os.devnull, "--quiet"]
    assert cli("score", str(DUMP), *MODEL, *args) == 0
    after = os.stat(os.devnull)
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    old = tmp_path / "x.json"
    old.write_text("old", encoding="utf-8")
    with pytest.raises(Terminated):
        with Output(old, "--json") as out:
            out.open("w", encoding="utf-8").write("half of the new")
            raise Terminated(signal.SIGTERM)
    assert old.read_text(encoding="utf-8") == "old" and [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_pending_temporary_files_are_removed(tmp_path: Path) -> None:
    out = Output(tmp_path / "r.html")
    out.open("w").write("never committed")
    assert len(list(tmp_path.iterdir())) == 1
    discard_pending()  # what the CLI does on leaving, and Python at exit
    assert list(tmp_path.iterdir()) == []
    out.discard()  # still fine


def test_a_replaced_file_keeps_its_mode_and_a_symlink_stays_one(tmp_path: Path) -> None:
    target = tmp_path / "real.md"
    target.write_text("old", encoding="utf-8")
    target.chmod(0o640)
    link = tmp_path / "link.md"
    link.symlink_to(target)
    write_text(link, "new")
    assert link.is_symlink() and target.read_text(encoding="utf-8") == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.md", "real.md"]


def test_rows_written_on_an_interrupt_are_kept_and_marked(tmp_path: Path) -> None:
    rows = tmp_path / "r.parquet"
    with pytest.raises(KeyboardInterrupt):
        with ResultWriter(rows) as w:
            w.write(BadRecord("d.jsonl:1", "bad", "s1"))
            raise KeyboardInterrupt
    assert len(read_results(rows)) == 1
    assert pq.read_metadata(rows).metadata[b"tito_fast.complete"] == b"false"
    assert [p.name for p in tmp_path.iterdir()] == ["r.parquet"]
