"""Miles' matcher hub names, answered by `tito_fast.chat.messages`."""

from miles.utils.chat_template_utils.message_matcher_hub.funcs import (
    SessionMessageMatcherError,
    assert_messages_append_only_with_allowed_role,
    loose_tool_call_message_matches,
    resolve_session_message_matcher,
    role_content_only_message_matches,
    strict_message_matches,
)
from miles.utils.chat_template_utils.message_matcher_hub.utils import SessionMessageMatcher

__all__ = [
    "SessionMessageMatcher",
    "SessionMessageMatcherError",
    "assert_messages_append_only_with_allowed_role",
    "loose_tool_call_message_matches",
    "resolve_session_message_matcher",
    "role_content_only_message_matches",
    "strict_message_matches",
]
