"""The package's layers: each module imports only its own layer and those below,
without cycles and without another module's private names; every module imports
on its own in a fresh interpreter; the former module paths still import.

Layers, bottom up: the Rust core; errors (with _deps, the one module that
imports the optional packages); tokenizer; compare; chat; session; testing
(fixtures, reference); score; cli; the package root.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import tito_fast
from tito_fast import _compat, _deps

ROOT = Path(tito_fast.__file__).parent
LAYERS = ["_core", "errors", "tokenizer", "compare", "chat", "session", "testing", "score", "chains", "cli"]
SAME_LAYER = {"_deps": "errors"}  # the optional packages' accessors sit with the errors they raise
#: Modules whose layer is not their package's: the pinned tokenizer fixtures import only errors, _deps and
#: the byte table, and `tito_fast.tokenizer.load` resolves `fixture:NAME` through them.
MODULE_LAYER = {"tito_fast.testing.fixtures": "tokenizer"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _layer(module: str) -> int:
    """The layer of a module: its first name below `tito_fast` (the root and its helpers are on top)."""
    if module in MODULE_LAYER:
        return LAYERS.index(MODULE_LAYER[module])
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ("__main__", "_compat"):
        return len(LAYERS)
    return LAYERS.index(SAME_LAYER.get(parts[1], parts[1]))


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(module imported, names taken from it, line) for every tito_fast import, at any depth."""
    out: list[tuple[str, list[str], int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tito_fast":
            names = [a.name for a in node.names]
            if node.module == "tito_fast":  # `from tito_fast import chat` names submodules
                for n in names:
                    sub = f"tito_fast.{n}"
                    out.append((sub if sub in MODULES or n == "_core" else "tito_fast", [], node.lineno))
            else:
                out.append((node.module, names, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names if a.name.split(".")[0] == "tito_fast"]
    return out


def _resolve(module: str) -> str:
    return module if module in MODULES or module == "tito_fast._core" else _compat.ALIASES.get(module, module)


def test_every_import_goes_down_or_across_without_private_names() -> None:
    problems = []
    for name, path in MODULES.items():
        for target, names, line in _imports(path):
            target = _resolve(target)
            where = f"{path.relative_to(ROOT.parent)}:{line}"
            if target not in MODULES and target != "tito_fast._core":
                problems.append(f"{where} imports {target}, which is not a module of the package")
                continue
            if _layer(target) > _layer(name):
                problems.append(f"{where}: {name} (layer {LAYERS[_layer(name)] if _layer(name) < len(LAYERS) else 'root'}) imports {target} from above it")
            private = [n for n in names if n.startswith("_") and not n.startswith("__") and n != "_core"]
            if private and target != "tito_fast._core":
                problems.append(f"{where}: {name} takes private names {private} from {target}")
    assert not problems, "\n".join(problems)


def test_no_import_cycles() -> None:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for target, _, _ in _imports(path):
            target = _resolve(target)
            if target in MODULES and target != name and not name.startswith(target + "."):
                graph[name].add(target)  # a package importing its own submodules is not a cycle
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_optional_packages_are_imported_by_deps_alone() -> None:
    """transformers, pyarrow, jinja2, ... are imported in `tito_fast._deps` only (which
    raises `MissingDependency` naming the extra): no `import` of them anywhere else."""
    optional = set(_deps.EXTRAS)
    found = []
    for name, path in MODULES.items():
        if name == "tito_fast._deps":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            found += [f"{path.relative_to(ROOT.parent)}:{node.lineno}: {t}" for t in tops if t in optional]
    assert not found, found


def test_import_tito_fast_imports_no_optional_package() -> None:
    code = "import json, sys, tito_fast, tito_fast.errors; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    loaded = set(json.loads(out.stdout))
    assert "tito_fast" in loaded
    assert not loaded & (set(_deps.EXTRAS) | {"torch"}), sorted(loaded & set(_deps.EXTRAS))


def test_each_module_imports_alone_in_a_fresh_interpreter() -> None:
    names = [n for n in MODULES if not n.endswith("__main__")]

    def run(name: str) -> tuple[str, int, str]:
        out = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, timeout=300)
        return name, out.returncode, out.stderr[-1500:]

    with ThreadPoolExecutor(max_workers=4) as pool:
        failed = [r for r in pool.map(run, names) if r[1] != 0]
    assert not failed, failed


def test_former_module_paths_still_import() -> None:
    code = """
import importlib
from tito_fast import _compat
for old, new in _compat.ALIASES.items():
    assert importlib.import_module(old) is importlib.import_module(new), old
from tito_fast.job import run_score, load_tokenizer
from tito_fast.score import Scorer, summarize, worst, Summary, SessionResult, MISMATCH_TYPES
from tito_fast.dump import read_dump
from tito_fast.ray import Scorer, summarize_table, BatchScorer
from tito_fast.families import FAMILIES, FamilyConfig, get_tito_tokenizer, patch_template, FamilyError
from tito_fast.messages import AppendOnlyError, check_append_only, strict, loose_tool_call
from tito_fast.render import render, canonical_tools, RenderError
from tito_fast.comparator import TokenSeqComparator, Mismatch, MismatchType
from tito_fast.diagnosis import RoleScheme, Diagnosis, DiagnosisItem
from tito_fast.verify import verify_family, replay, conversations, completion_ids
from tito_fast.encoder import FastEncoder
from tito_fast.vocab import Vocab
from tito_fast import fixtures, reference
from tito_fast.cli import cli, main
assert BatchScorer is Scorer
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    out = subprocess.run([sys.executable, "-m", "tito_fast.fixtures"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "qwen3:" in out.stdout, out.stderr[-2000:]


def test_no_private_attributes_of_other_objects() -> None:
    """`obj._name` only on `self` or `cls`: modules talk through public names."""
    found = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                base = node.value
                if isinstance(base, ast.Name) and base.id in ("self", "cls", "_core"):
                    continue
                found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: .{node.attr}")
    assert not found, found


def test_tests_are_grouped_by_layer() -> None:
    tests = Path(__file__).parent
    folders = {p.name for p in tests.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert {"kernels", "tokenizer", "compare", "chat", "session", "score", "cli"} <= folders
    loose = sorted(p.name for p in tests.glob("test_*.py"))
    assert loose == ["test_api.py", "test_docs.py", "test_layers.py", "test_threads.py"], loose  # the cross-cutting suites



#: The one atomic writer, the fixtures' cache and the tokenizer tables' cache (below their
#: layers: derived files kept between runs, not a command's output).
WRITERS = {"tito_fast.score.outputs", "tito_fast.testing.fixtures", "tito_fast.tokenizer.cache"}


def _writes(node: ast.AST) -> str | None:
    """What a call writes a file with, when it does: `open(..., "w")`, `os.replace`, `tempfile`, `Path.write_text`."""
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    if isinstance(f, ast.Name) and f.id == "open":
        mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
        if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+"):
            return f"open(..., {mode.value!r})"
    if isinstance(f, ast.Attribute):
        base = f.value.id if isinstance(f.value, ast.Name) else ""
        if (base == "os" and f.attr in ("replace", "rename")) or base == "tempfile" or f.attr in ("write_text", "write_bytes"):
            return f"{base + '.' if base else ''}{f.attr}"
        if f.attr == "write_table" and len(node.args) > 1 and "sink()" not in ast.unparse(node.args[1]):
            return "pyarrow's write_table to a path (not an Output's sink())"
    return None


def test_files_are_written_through_the_one_writer() -> None:
    """Every output file goes through `tito_fast.score.outputs` (`Output`, `write_output`): whole or not
    at all, a device or FIFO in place; no module opens a file for writing or renames one itself."""
    found = []
    for name, path in MODULES.items():
        if name in WRITERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (what := _writes(node)) is not None:
                found.append(f"{path.relative_to(ROOT.parent)}:{getattr(node, 'lineno', '?')}: {what}")
    assert not found, found


def test_tokenizers_are_loaded_by_the_tokenizer_layer() -> None:
    """`from_pretrained` (a folder, a fixture) only in the tokenizer layer (`tito_fast.tokenizer.load`,
    the byte table's folder argument, the fixtures): every door takes a spec through `load_tokenizer`."""
    found = []
    for name, path in MODULES.items():
        if _layer(name) == LAYERS.index("tokenizer"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "from_pretrained":
                found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    assert not found, found


def test_the_command_line_owns_no_job() -> None:
    """`tito_fast.cli.main` parses, builds options, makes one library call and prints: it reads no
    dump, scores nothing and builds no report itself (those are `score.files`, `score.diff`, `chains.job`)."""
    path = MODULES["tito_fast.cli.main"]
    imported = {target for target, _, _ in _imports(path)}
    jobs = {"tito_fast.score.report", "tito_fast.score.scorer", "tito_fast.chains", "tito_fast.chains.core", "tito_fast.chains.output"}
    assert not imported & jobs, sorted(imported & jobs)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import) and any(a.name == "numpy" for a in n.names)]
