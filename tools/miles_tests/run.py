"""Run Miles' own TITO tests against Miles and against tito_fast in Miles' place (by hand).

    MILES_DIR=<miles checkout> python tools/miles_tests/run.py [--extra-path DIR] [test files...]

For each selected test file of the Miles checkout this runs pytest twice in
a scratch folder: once with Miles' code, once with `miles.utils.chat_template_utils`
answered by tito_fast (`tools/miles_tests/shim/`: Miles' module names mapped
onto tito_fast; every other Miles module, such as the session server's
`LinearTrajectory`, stays Miles' own and calls tito_fast through them). It
prints both summaries and the tests that pass with Miles but not with
tito_fast. Model ids the tests load from the Hugging Face hub are served
from tito_fast's offline fixtures. Miles' SGLang imports are stood in for by
`../shared/tools/miles_reference.py`. Nothing here runs in CI; the test files
are copied into the scratch folder only for the run.

`--extra-path` names a folder with packages the Miles test files import but
tito_fast does not need (fastapi, uvicorn), e.g. made by
`pip install --target DIR fastapi uvicorn`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED_TOOL = HERE.parents[2] / "shared" / "tools" / "miles_reference.py"
DEFAULT_TESTS = [
    "tests/fast/utils/chat_template_utils/test_message_matcher_hub.py",
    "tests/fast/utils/chat_template_utils/test_tito_tokenizer.py",
    "tests/fast/utils/chat_template_utils/test_fixed_templates.py",
    "tests/fast/utils/chat_template_utils/test_token_seq_comparator.py",
    "tests/fast/utils/chat_template_utils/test_pretokenized_via_tito.py",
    "tests/fast/router/test_linear_trajectory.py",
    "tests/fast/router/test_session_message_matcher.py",
]
# Hub model ids in those tests -> tito_fast fixture tokenizers with the same files.
MODELS = {
    "Qwen/Qwen3-0.6B": "qwen3",
    "Qwen/Qwen3-4B": "qwen3",
    "Qwen/Qwen3-4B-Thinking-2507": "qwen3",  # same tokenizer; Miles installs the 2507 fixed template itself
    "Qwen/Qwen3.5-0.8B": "qwen35",
    "zai-org/GLM-4.7-Flash": "glm47",
}

CONFTEST = '''
import importlib.util, os, sys
mode = os.environ["TITO_MILES_MODE"]
if mode == "tito_fast":
    sys.path.insert(0, os.environ["TITO_MILES_SHIM"])
else:
    sys.path.insert(0, os.environ["MILES_DIR"])
if os.environ.get("TITO_MILES_EXTRA"):
    sys.path.append(os.environ["TITO_MILES_EXTRA"])
spec = importlib.util.spec_from_file_location("miles_reference", os.environ["TITO_MILES_REFERENCE"])
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)
ref._install_stubs()  # sglang's protocol models and encoding_dsv4, as the shared tool stands them in
from typing import Optional
_proto = sys.modules["sglang.srt.entrypoints.openai.protocol"]
_names = {"Optional": Optional, "Function": _proto.Function, "Tool": _proto.Tool}
_proto.Function.model_rebuild(_types_namespace=_names)  # TypeAdapter(list[Tool]) needs them resolved
_proto.Tool.model_rebuild(_types_namespace=_names)
ref._register_config_aliases()  # Miles' own registration also registers model classes, which needs torch
import types
for name in ("sglang.srt.function_call", "sglang.srt.function_call.function_call_parser"):
    if name not in sys.modules:  # imported by Miles' mock server module, unused by these tests
        module = types.ModuleType(name)
        module.__path__ = []
        module.FunctionCallParser = type("FunctionCallParser", (), {})
        sys.modules[name] = module
# Miles' mock SGLang server module pulls in torch through its HTTP and logging helpers; the
# trajectories these tests use only need its two names.
from dataclasses import dataclass as _dataclass
from typing import Callable as _Callable
_server = types.ModuleType("miles.utils.test_utils.mock_sglang_server")
_server.ProcessResult = _dataclass(type("ProcessResult", (), {"__annotations__": {"text": str, "finish_reason": str}, "finish_reason": "stop"}))
_server.ProcessFn = _Callable[[str], _server.ProcessResult]
sys.modules[_server.__name__] = _server

from transformers import AutoTokenizer
from tito_fast.testing import fixtures

_models = {models!r}
_load = AutoTokenizer.from_pretrained.__func__

def _from_pretrained(cls, name, *args, **kwargs):
    if name in _models:
        name = str(fixtures.tokenizer_dir(_models[name]))
    return _load(cls, name, *args, **kwargs)

AutoTokenizer.from_pretrained = classmethod(_from_pretrained)
'''


def _scratch(miles: Path, tests: list[str]) -> Path:
    root = Path(tempfile.mkdtemp(prefix="miles-tests-"))
    for rel in tests:
        src = miles / rel
        dst = root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
    for folder in {p for rel in tests for p in (root / rel).parents if root in p.parents or p == root}:
        if folder != root:
            (folder / "__init__.py").touch()
    ci = root / "tests" / "ci"
    ci.mkdir(parents=True, exist_ok=True)
    (ci / "__init__.py").touch()
    (ci / "ci_register.py").write_text("def register_cpu_ci(*a, **k):\n    pass\n\n\ndef register_cuda_ci(*a, **k):\n    pass\n")
    (root / "conftest.py").write_text(CONFTEST.replace("{models!r}", repr(MODELS)))
    return root


def _run(root: Path, tests: list[str], mode: str, env: dict[str, str]) -> tuple[str, set[str], set[str]]:
    junit = root / f"junit-{mode}.xml"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--continue-on-collection-errors", "-o", "addopts=", "-o", "filterwarnings=",
         "--rootdir", str(root), f"--junitxml={junit}", *tests],
        cwd=root, env={**env, "TITO_MILES_MODE": mode}, capture_output=True, text=True,
    )
    passed, failed = set(), set()
    import xml.etree.ElementTree as ET

    if junit.is_file():
        for case in ET.parse(junit).getroot().iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            (failed if any(c.tag in ("failure", "error") for c in case) else passed).add(name)
    summary = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-2000:]
    return summary, passed, failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tests", nargs="*", default=DEFAULT_TESTS)
    ap.add_argument("--miles", default=os.environ.get("MILES_DIR", ""))
    ap.add_argument("--extra-path", default="")
    ap.add_argument("--show", type=int, default=80, help="failures listed")
    ns = ap.parse_args()
    miles = Path(ns.miles).resolve()
    if not (miles / "miles" / "utils" / "chat_template_utils").is_dir():
        raise SystemExit("set MILES_DIR (or --miles) to a Miles checkout")
    root = _scratch(miles, ns.tests)
    env = {
        **os.environ,
        "MILES_DIR": str(miles),
        "TITO_MILES_SHIM": str(HERE / "shim"),
        "TITO_MILES_EXTRA": ns.extra_path,
        "TITO_MILES_REFERENCE": str(SHARED_TOOL),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.setdefault("REF_TOKENIZERS", str(Path.home() / ".cache" / "tito_fast" / "tokenizers"))
    results = {}
    for mode in ("miles", "tito_fast"):
        summary, passed, failed = _run(root, ns.tests, mode, env)
        results[mode] = (passed, failed)
        print(f"{mode:9s}: {summary}")
    only_miles = sorted(results["miles"][0] & results["tito_fast"][1])
    print(f"\npass with Miles, fail with tito_fast: {len(only_miles)}")
    for name in only_miles[: ns.show]:
        print("  ", name)
    only_ours = sorted(results["tito_fast"][0] & results["miles"][1])
    print(f"pass with tito_fast, fail with Miles: {len(only_ours)}")
    for name in only_ours[: ns.show]:
        print("  ", name)
    print(f"\nscratch folder (junit XML of both runs): {root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
