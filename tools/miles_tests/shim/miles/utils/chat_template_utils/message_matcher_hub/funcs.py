"""Matchers, the resolver and the append-only check from tito_fast.chat.messages."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from tito_fast.chat import messages as _m

SessionMessageMatcherError = _m.MatcherError
strict_message_matches = _m.strict
loose_tool_call_message_matches = _m.loose_tool_call
role_content_only_message_matches = _m.role_content_only
_validated = _m.validated_matcher


def resolve_session_message_matcher(selector: str) -> _m.Matcher:
    return _m.validated_matcher(_m.resolve_matcher(selector))


def assert_messages_append_only_with_allowed_role(
    stored_messages: list[dict[str, Any]],
    new_messages: list[dict[str, Any]],
    allowed_append_roles: Collection[str],
    *,
    message_matcher: _m.Matcher | None = None,
) -> None:
    _m.check_append_only(stored_messages, new_messages, allowed_append_roles, message_matcher or "strict")
