"""The matcher type alias (tito_fast.messages.Matcher)."""

from tito_fast.messages import TEMPLATE_KEYS as _TEMPLATE_RELEVANT_KEYS  # noqa: F401
from tito_fast.messages import Matcher as SessionMessageMatcher  # noqa: F401
