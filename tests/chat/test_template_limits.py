"""The renderers' limits (docs/templates.md): a hostile template ends in
`TemplateLimitError` (code `template_limit`) on both renderers, quickly and
without exhausting memory; at start-up it is exit 2 with one line, on one
record of `tito-fast score` it is a `template_limit` bad record.

The riskiest cases run in a child process under an address-space limit, so a
failure cannot take the machine down."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tito_fast._core import NativeTemplate, TemplateRenderError
from tito_fast.chat.render import _compile, native_renderer, render_jinja
from tito_fast.errors import BAD_RECORD_CODES, CATALOGUE, TemplateLimitError, exit_code_of

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "qwen3_dump.jsonl"
CTX: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}

HOSTILE = {
    "doubling ~": "{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "doubling +": "{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
    "nested ranges": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "repetition": "{{ 'a' * 10**9 }}",
    "str.format width": "{{ '{:1000000000}'.format('x') }}",
    "format filter width": "{{ '%1000000000s'|format('x') }}",
    "macro recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "huge range": "{{ range(10**9)|length }}",
    "macro doubling": "{% macro d(s) %}{{ s }}{{ s }}{% endmacro %}{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = d(ns.s) %}{% endfor %}{{ ns.s }}",
    "join of repeats": "{{ ([messages[0].content * 10000] * 100000000)|join }}",
}
#: Only the jinja2 renderer has these forms (minijinja refuses them: jinja2 renders).
JINJA_ONLY = {
    "printf width": "{{ '%1000000000s' % 'x' }}",
    "center": "{{ 'x'.center(10**9) }}",
    "center filter": "{{ 'x'|center(10**9) }}",
    "recursive loop fan-out": "{% for x in range(10) recursive %}{{ loop(range(10)) }}{% endfor %}",
}


def _in_child(code: str, gib: int = 3) -> subprocess.CompletedProcess[str]:
    """Run `code` in a child Python under an address-space limit of `gib` GiB."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (gib << 30, gib << 30))

    env = dict(os.environ)  # tito_fast as this interpreter has it (installed or editable), not the checkout's sources
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env, preexec_fn=cap)


def test_the_error_is_catalogued() -> None:
    assert CATALOGUE["template_limit"][:2] == ("TemplateLimitError", 2)
    assert "template_limit" in BAD_RECORD_CODES
    assert exit_code_of(TemplateLimitError("x")) == 2
    assert not issubclass(TemplateLimitError, TemplateRenderError)  # never a fallback to jinja2


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_native_limits(name: str) -> None:
    with pytest.raises(TemplateLimitError) as e:
        NativeTemplate(HOSTILE[name]).render(CTX)
    assert e.value.reason


@pytest.mark.parametrize("name", sorted(HOSTILE | JINJA_ONLY))
def test_jinja_limits(name: str) -> None:
    with pytest.raises(TemplateLimitError) as e:
        render_jinja(_compile((HOSTILE | JINJA_ONLY)[name]), CTX)
    assert e.value.reason


def test_a_limit_is_not_a_fallback() -> None:
    """The native renderer's limit propagates: jinja2 is not tried (it would hang)."""
    r = native_renderer("{% if messages[0].content == 'boom' %}" + HOSTILE["nested ranges"] + "{% endif %}ok", {})
    assert r.reason is None and r.render(CTX) == "ok"
    with pytest.raises(TemplateLimitError):
        r.render({"messages": [{"role": "user", "content": "boom"}]})
    assert r.fallbacks == 0


def test_doubling_does_not_abort_the_process() -> None:
    """The string-doubling template, end to end in a child under 3 GiB: an error, not an abort."""
    code = (
        "from tito_fast._core import NativeTemplate, TemplateLimitError\n"
        "from tito_fast.chat.render import _compile, render_jinja\n"
        f"src = {HOSTILE['doubling ~']!r}\n"
        "for f in (lambda: NativeTemplate(src).render({}), lambda: render_jinja(_compile(src), {})):\n"
        "    try:\n"
        "        f()\n"
        "    except TemplateLimitError as e:\n"
        "        print('limit', e.reason)\n"
    )
    out = _in_child(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("limit") == 2


def test_deep_nesting_does_not_overflow_the_stack() -> None:
    """A value nested as deep as the fuel allows is dropped without a stack overflow."""
    src = "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [[[[ns.l]]]] %}{% endfor %}x"
    code = (
        "from tito_fast._core import NativeTemplate, TemplateLimitError\n"
        "try:\n"
        f"    print(NativeTemplate({src!r}).render({{}}))\n"
        "except TemplateLimitError as e:\n"
        "    print('limit')\n"
    )
    out = _in_child(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("x", "limit")


def test_ordinary_renders_are_unaffected() -> None:
    src = (
        "{% for m in messages %}{{ m.role ~ ': ' ~ m.content }}|{{ '%-6s' % m.role }}|{{ '{:>4}'.format(m.content) }}"
        "|{{ m.content|center(6) }}|{{ ', '.join(m.content.split()) }}{% endfor %}{{ range(3)|list }}"
    )
    ctx = {"messages": [{"role": "user", "content": "a b"}]}
    want = "user: a b|user  | a b| a b  |a, b[0, 1, 2]"
    assert render_jinja(_compile(src), ctx) == want
    assert native_renderer(src, {}).render(ctx) in (want, None)  # `%` is jinja2's alone


# -- native and jinja2 agree: the same text, or a limit on both ---------------

ORDINARY = [
    "{{ messages[0].content }}",
    "{% for m in messages %}[{{ m.role }}]{% endfor %}",
    "{{ messages|length }}",
    "{% if messages %}yes{% endif %}",
    "{{ 'a' ~ 'b' }}",
    "{{ messages[0].content * 3 }}",
]
HOSTILE_FRAGMENTS = [
    "{% for i in range(100000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
    "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "{{ 'a' * 10**10 }}",
    "{{ '{:10000000000}'.format('x') }}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{{ range(10**7)|length }}",
]
SHALLOW = [
    "{% macro g(n) %}{% if n > 0 %}{{ g(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ g(5) }}",
    "{% for i in range(20) %}{{ i }}{% endfor %}",
    "{{ '{:>5}'.format('x') }}",
    "{{ 'ab' * 3 }}",
]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(ORDINARY + SHALLOW + HOSTILE_FRAGMENTS), min_size=1, max_size=4))
def test_native_and_jinja_agree_or_both_hit_a_limit(fragments: list[str]) -> None:
    src = "".join(fragments)
    ctx = {"messages": [{"role": "user", "content": "hi there"}]}
    try:
        want: str | None = render_jinja(_compile(src), ctx)
    except TemplateLimitError:
        want = None
    try:
        got: str | None = NativeTemplate(src).render(ctx)
    except TemplateLimitError:
        got = None
    except TemplateRenderError:  # not rendered natively: jinja2's text stands
        return
    assert got == want, src
    assert (want is None) == any(f in HOSTILE_FRAGMENTS for f in fragments), src


# -- the command line ------------------------------------------------------------


def _run(*args: str, cwd: Path) -> tuple[int, str, str]:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))

    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSFORMERS_")}
    out = subprocess.run(
        [sys.executable, "-m", "tito_fast", *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env,
        preexec_fn=cap,
    )  # fmt: skip
    return out.returncode, out.stdout, out.stderr


def _qwen3_template() -> str:
    from tito_fast.chat.render import template_of
    from tito_fast.tokenizer.load import load_tokenizer

    return template_of(load_tokenizer("fixture:qwen3"))


def test_cli_hostile_template_is_exit_2_in_one_line(tmp_path: Path) -> None:
    t = tmp_path / "hostile.jinja"
    t.write_text(HOSTILE["doubling ~"] + _qwen3_template(), encoding="utf-8")
    code, _, err = _run("score", str(EXAMPLE), "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--template", str(t), cwd=tmp_path)
    lines = [x for x in err.splitlines() if x.strip().startswith("tito-fast:")]
    assert code == 2, err
    assert "Traceback" not in err and len(lines) == 1, err
    assert "limit" in lines[0]


def test_one_record_past_a_limit_is_a_bad_record(tmp_path: Path) -> None:
    """A template fired by one record's content: that record is a `template_limit` bad record, the run goes on."""
    from tito_fast.score.run import run_score

    trigger = "{% if messages[0].content == 'BOOM' %}" + HOSTILE["nested ranges"] + "{% endif %}"
    good = json.loads(EXAMPLE.read_text(encoding="utf-8").splitlines()[0])
    good.pop("family", None)  # the `default` family: a template given is not replayed
    bad = json.loads(json.dumps(good))
    bad["session_id"] = "boom"
    bad["messages"][0]["content"] = "BOOM"
    p = tmp_path / "dump.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in (good, bad, good)) + "\n", encoding="utf-8")
    run = run_score(p, "fixture:qwen3", "default", template=trigger + _qwen3_template(), on_error="skip")
    assert len(run.results) == 2
    assert [(b.code, b.session_id) for b in run.bad] == [("template_limit", "boom")]
    assert "limit" in run.bad[0].reason
