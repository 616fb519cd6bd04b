"""tito_fast: prove that the trainer sees exactly the tokens the engine saw.

In a multi-turn rollout, turn n-1's prompt+completion ids must be a bit-exact
prefix of turn n's prompt ids (TITO, token-in-token-out). This package holds
the kernels that check and build such sequences fast: longest common prefix,
the prefix check with trailing trim, the families' splice rules, a
checkpointed session buffer, and batch versions that use every core.

Every function takes token ids as a list of ints, a 1-D numpy integer array
(borrowed without a copy when contiguous), or any 1-D integer buffer. Bad ids
raise `TokenInputError` (a `ValueError`) naming the argument and position.

Example:
    >>> import tito_fast
    >>> tito_fast.common_prefix_len([1, 2, 3], [1, 2, 4])
    2
"""

from tito_fast import _compat
from tito_fast._core import (
    PrefixMismatchError,
    TokenBuffer,
    TokenBufferError,
    TokenInputError,
    __version__,
    build_profile,
    check_prefix,
    common_prefix_len,
    common_prefix_len_batch,
    common_prefix_len_csr,
    merge_tokens,
    trim_trailing,
)
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tito_fast.chains import Assembly, Chain, assemble
    from tito_fast.chat.families import FamilyConfig, TitoTokenizer, get_tito_tokenizer
    from tito_fast.compare.comparator import Mismatch, MismatchType, Segment, TokenSeqComparator
    from tito_fast.compare.diagnosis import Diagnosis, DiagnosisItem, RoleScheme
    from tito_fast.errors import AppendOnlyError, FamilyError, RenderDiffError, RenderError, RollbackError
    from tito_fast.session.derive import Derivation, derive_family
    from tito_fast.session.trajectory import Trajectory
    from tito_fast.tokenizer.encoder import FastEncoder
    from tito_fast.tokenizer.vocab import Vocab

#: The Python layer's names, each imported from its module when first used
#: (`python -m tito_fast score` imports what scoring needs, not the assembly
#: or the derivation: a run's start-up is mostly imports).
_LAZY = {
    **dict.fromkeys(("Assembly", "Chain", "assemble"), "tito_fast.chains"),
    **dict.fromkeys(("FamilyConfig", "TitoTokenizer", "get_tito_tokenizer"), "tito_fast.chat.families"),
    **dict.fromkeys(("Mismatch", "MismatchType", "Segment", "TokenSeqComparator"), "tito_fast.compare.comparator"),
    **dict.fromkeys(("Diagnosis", "DiagnosisItem", "RoleScheme"), "tito_fast.compare.diagnosis"),
    **dict.fromkeys(("AppendOnlyError", "FamilyError", "RenderDiffError", "RenderError", "RollbackError"), "tito_fast.errors"),
    **dict.fromkeys(("Derivation", "derive_family"), "tito_fast.session.derive"),
    "Trajectory": "tito_fast.session.trajectory",
    "FastEncoder": "tito_fast.tokenizer.encoder",
    "Vocab": "tito_fast.tokenizer.vocab",
}


if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all attribute

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'tito_fast' has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


_compat.install()  # old module paths (tito_fast.comparator, tito_fast.job, ...) keep working

__all__ = [
    "PrefixMismatchError",
    "TokenBuffer",
    "TokenBufferError",
    "TokenInputError",
    "__version__",
    "build_profile",
    "check_prefix",
    "common_prefix_len",
    "common_prefix_len_batch",
    "common_prefix_len_csr",
    "merge_tokens",
    "trim_trailing",
    "Mismatch",
    "MismatchType",
    "Segment",
    "TokenSeqComparator",
    "Diagnosis",
    "DiagnosisItem",
    "RoleScheme",
    "Vocab",
    "FastEncoder",
    "AppendOnlyError",
    "FamilyConfig",
    "FamilyError",
    "RenderDiffError",
    "RenderError",
    "TitoTokenizer",
    "get_tito_tokenizer",
    "RollbackError",
    "Trajectory",
    "Derivation",
    "derive_family",
    "assemble",
    "Assembly",
    "Chain",
]
