"""The matcher type alias (tito_fast.chat.messages.Matcher)."""

from tito_fast.chat.messages import TEMPLATE_KEYS as _TEMPLATE_RELEVANT_KEYS  # noqa: F401
from tito_fast.chat.messages import Matcher as SessionMessageMatcher  # noqa: F401
