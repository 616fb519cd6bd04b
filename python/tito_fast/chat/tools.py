"""Tool definitions in the shape the inference engine hands to the template.

Each tool becomes `{"type": "function", "function": {...}}` through a named
policy (`TOOL_POLICIES`): `sglang` (the default: what current SGLang's
pydantic `Tool` model dumps, with `"defer_loading": null` per tool and
`"strict": false` per function), `sglang-legacy` (no `defer_loading`) or
`none` (as given).

Example:
    >>> canonical_tools([{"name": "f"}], "sglang-legacy")
    [{'type': 'function', 'function': {'description': None, 'name': 'f', 'parameters': None, 'strict': False}}]
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from tito_fast._core import canonical_tools as _canonical_tools
from tito_fast.errors import RenderError

TOOL_POLICIES = ("sglang", "sglang-legacy", "none")
ToolPolicy = Literal["sglang", "sglang-legacy", "none"]


def plain_copy(value: Any) -> Any:
    """A copy of nested dicts and lists (the leaves are shared: they are immutable
    scalars in chat messages); much cheaper than `copy.deepcopy`."""
    t = type(value)
    if t is dict:
        return {k: plain_copy(v) for k, v in value.items()}
    if t is list:
        return [plain_copy(v) for v in value]
    if t is tuple:
        return tuple(plain_copy(v) for v in value)
    if t in (str, int, float, bool) or value is None:
        return value
    return copy.deepcopy(value)


def canonical_tools(tools: list[dict[str, Any]] | None, policy: ToolPolicy = "sglang") -> list[dict[str, Any]] | None:
    """Tools in the shape the engine hands to the template.

    Each tool becomes `{"type": "function", "function": {...}}`; under the
    SGLang policies the function has exactly `description`, `name`,
    `parameters`, `strict` (defaults None, None, False) in that order, and
    `sglang` adds `"defer_loading": None` after `function` (a non-null
    tool-level value moves into the function instead, as SGLang does). The
    rule has one owner, the Rust core (`_core.canonical_tools`,
    rust/src/check/normalise.rs), which the native session check uses too.

    Example:
        >>> canonical_tools([{"name": "f"}])
        [{'type': 'function', 'function': {'description': None, 'name': 'f', 'parameters': None, 'strict': False}, 'defer_loading': None}]
    """
    if policy not in TOOL_POLICIES:
        raise ValueError(f"tool policy must be one of {TOOL_POLICIES}, got {policy!r}")
    if not tools:
        return None
    try:
        return _canonical_tools(tools, policy)
    except ValueError as e:
        raise RenderError(str(e)) from None
