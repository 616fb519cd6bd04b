"""Messages -> text -> ids: message matchers, tool canonicalisation, chat-template
rendering (and DeepSeek's encoder modules), Miles' fixed templates, and the TITO
families that merge a session's stored ids with the ids of appended messages."""

from tito_fast.chat.families import FamilyConfig, TitoTokenizer, get_tito_tokenizer
from tito_fast.chat.messages import check_append_only
from tito_fast.chat.render import render
from tito_fast.errors import AppendOnlyError, FamilyError, MatcherError, RenderDiffError, RenderError, TemplateNotAppendOnlyError

__all__ = [
    "AppendOnlyError",
    "FamilyConfig",
    "FamilyError",
    "MatcherError",
    "RenderDiffError",
    "RenderError",
    "TemplateNotAppendOnlyError",
    "TitoTokenizer",
    "check_append_only",
    "get_tito_tokenizer",
    "render",
]
