"""Type stubs of the Rust extension `tito_fast._core`.

Token ids (`_TokenIds`) may be a list or tuple of ints, a 1-D numpy array of
any integer dtype (borrowed without a copy when contiguous), any 1-D
contiguous buffer of integers (`array.array`, `memoryview`, `bytes`), an
object with `__array__` (torch CPU tensors, pyarrow arrays), a
`TokenBuffer` (read in place), or another iterable of ints such as `range`.
Every id must lie in [0, 2**32-1].
"""

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ClassVar, Final, Self, SupportsIndex, TypeAlias, TypeVar, final, overload

import numpy as np
import numpy.typing as npt

__all__ = [
    "assemble_calls",
    "TokenBuffer",
    "check_prefix",
    "common_prefix_len",
    "common_prefix_len_batch",
    "common_prefix_len_csr",
    "merge_tokens",
    "trim_trailing",
    "TokenInputError",
    "PrefixMismatchError",
    "TokenBufferError",
    "__version__",
    "build_profile",
    "DETACH_MIN",
    "ROLES",
    "ROLE_ALIASES",
    "ROLE_PROBE_IDS",
    "ID_FIELDS",
    "RoleMarkers",
    "VERDICT_UNKNOWN",
    "VERDICT_SAME_TEXT",
    "VERDICT_SPECIAL_TYPE",
    "VERDICT_ASSISTANT_TEXT",
    "VERDICT_NON_ASSISTANT_TEXT",
    "Alignment",
    "AddedTokenSplitter",
    "Segmenter",
    "BpeEncoder",
    "NativeTemplate",
    "SessionChecker",
    "CheckedSession",
    "MessageBounds",
    "block_messages",
    "HISTORY_SENTINEL",
    "TemplateRenderError",
    "TemplateLimitError",
    "read_dump_lines",
    "read_dump_row",
    "read_call_lines",
    "read_call_row",
    "json_loads",
    "bad_record_codes",
    "check_call_texts",
    "normalize_messages",
    "canonical_tools",
    "keep_freed_memory",
    "pool_size",
]

_TokenIds: TypeAlias = "Sequence[SupportsIndex] | npt.NDArray[np.integer[Any]] | TokenBuffer | Iterable[SupportsIndex]"
_S = TypeVar("_S")

__version__: Final[str]
build_profile: Final[str]
"""`"release"` or `"debug"`: how the extension was compiled."""
DETACH_MIN: Final[int]
"""Inputs of at least this many ids are processed with the GIL released."""
ROLES: Final[tuple[str, ...]]
"""The roles a role table names; any other name reads "unknown"."""
ROLE_ALIASES: Final[dict[str, str]]
"""Other names of the roles (`"model"` -> `"assistant"`)."""
ROLE_PROBE_IDS: Final[int]
"""Ids decoded after a named marker to read the role name."""
ID_FIELDS: Final[tuple[str, ...]]
"""The record fields that hold token ids (dumps' and captures')."""
HISTORY_SENTINEL: Final[str]
"""The content of the user message a history render puts after a prefix (`MessageBounds`)."""


#: A dump record as the one reader gives it: ("ok", session_id | None, family | None,
#: messages, token_ids, tools | None, metadata | None) or ("bad", reason, session_id | None, code).
_DumpRead: TypeAlias = (
    tuple[str, str | None, str | None, list[dict[str, Any]], npt.NDArray[np.uint32], list[Any] | None, Any]
    | tuple[str, str, str | None, str]
)
#: A capture record as the one reader gives it: ("ok", session_id, call_index | None,
#: prompt_ids, completion_ids, completion_logprobs | None, finish_reason | None,
#: messages | None, tools | None, response, metadata) or ("bad", reason, session_id | None).
_CallRead: TypeAlias = (
    tuple[
        str, str, int | None, npt.NDArray[np.uint32], npt.NDArray[np.uint32], npt.NDArray[np.float32] | None,
        str | None, list[dict[str, Any]] | None, list[Any] | None, Any, Any,
    ]
    | tuple[str, str, str | None, str]
)

def read_dump_lines(lines: list[bytes]) -> list[_DumpRead]:
    """Read score-dump JSONL lines with the one reader (rust/src/record): Python
    `json`'s semantics (last duplicate key wins, exact integers, NaN/Infinity as
    floats), bounded (256 levels, 4,300 digits; lone surrogates and invalid
    UTF-8 are bad records), and the dump's field rules.

    Example:
        >>> from tito_fast._core import read_dump_lines
        >>> read_dump_lines([b'{"messages": [{"role": "user"}], "token_ids": [1]}'])[0][:2]
        ('ok', None)
    """
def read_dump_row(row: Any, *, json_text: bool = False) -> _DumpRead:
    """A dump record from a dict (a Parquet row: `json_text` lets messages,
    tools and metadata be JSON text), by the same rules as `read_dump_lines`.

    Example:
        >>> from tito_fast._core import read_dump_row
        >>> read_dump_row({"messages": [], "token_ids": [1]})
        ('bad', "'messages' must be a non-empty list", None, 'bad_field')
    """
def read_call_lines(lines: list[bytes]) -> list[_CallRead]:
    """Read capture-file JSONL lines with the one reader (see `read_dump_lines`).

    Example:
        >>> from tito_fast._core import read_call_lines
        >>> read_call_lines([b'{"prompt_ids": [1]}'])[0]
        ('bad', "missing field 'session_id'", None, 'missing_field')
    """
def read_call_row(row: Any, *, json_text: bool = False) -> _CallRead:
    """A capture record from a dict, by the same rules as `read_call_lines`.

    Example:
        >>> from tito_fast._core import read_call_row
        >>> read_call_row({"session_id": "s", "prompt_ids": [1], "completion_ids": []})[:3]
        ('ok', 's', None)
    """
def check_call_texts(messages: list[Any], tools: list[Any], metadata: list[Any]) -> list[str | None]:
    """The capture rules for many rows' `messages`, `tools` and `metadata` (JSON text or None),
    without building Python objects: per row the reason it is bad, or None.

    Example:
        >>> from tito_fast._core import check_call_texts
        >>> check_call_texts(['[{"role": "user"}]', "[1"], [None, None], [None, None])[0] is None
        True
    """
def pool_size(threads: int | None = None) -> int:
    """The threads a call asked for `threads` runs on (None: one per core): at
    least 1, at most the cores this process may use (its CPU affinity and
    cgroup quota) and 256. Raises ValueError for a count below 1.

    Example:
        >>> from tito_fast._core import pool_size
        >>> pool_size(1)
        1
    """
def keep_freed_memory(trim_bytes: int, mmap_bytes: int) -> bool:
    """Ask glibc's malloc to keep freed memory for reuse: blocks up to
    `mmap_bytes` come from its heap, and up to `trim_bytes` of free heap are
    kept rather than handed back to the system (`mallopt`). The `tito-fast`
    command calls it for its own process. False when this is not a glibc
    build (nothing changed) or glibc refused a value.

    Example:
        >>> from tito_fast._core import keep_freed_memory
        >>> keep_freed_memory(256 << 20, 32 << 20)  # doctest: +SKIP
        True
    """
def bad_record_codes() -> list[tuple[str, str]]:
    """Every bad-record code with its meaning (`tito_fast.errors.BAD_RECORD_CODES`).

    Example:
        >>> from tito_fast._core import bad_record_codes
        >>> dict(bad_record_codes())["too_deep"]
        'JSON nested deeper than 256 levels'
    """
def json_loads(text: str | bytes) -> Any:
    """JSON text read as every record is read (raises ValueError with the reason).

    Example:
        >>> from tito_fast._core import json_loads
        >>> json_loads('{"a": 1, "a": 123456789012345678901234567890}')
        {'a': 123456789012345678901234567890}
    """
def normalize_messages(
    messages: Sequence[dict[str, Any]], *, arguments: str = "dict", none_keys: str = "keep", alias: bool = False
) -> list[dict[str, Any]]:
    """Messages as the engine hands them to a template (the one owner of the rule).

    Example:
        >>> from tito_fast._core import normalize_messages
        >>> normalize_messages([{"role": "assistant", "content": None}])
        [{'role': 'assistant', 'content': ''}]
    """
def canonical_tools(tools: Sequence[dict[str, Any]] | None, policy: str = "sglang") -> list[dict[str, Any]] | None:
    """Tools in the engine's shape by policy (the one owner of the rule).

    Example:
        >>> from tito_fast._core import canonical_tools
        >>> canonical_tools([{"name": "f"}], "sglang-legacy")
        [{'type': 'function', 'function': {'description': None, 'name': 'f', 'parameters': None, 'strict': False}}]
    """

class TokenInputError(ValueError):
    """Token ids that cannot be used: not integers, out of [0, 2**32-1], or not a flat sequence.

    Example:
        >>> import tito_fast
        >>> try:
        ...     tito_fast.common_prefix_len([1, -2], [1])
        ... except tito_fast.TokenInputError as e:
        ...     (e.argument, e.position)
        ('a', 1)
    """

    #: Its code and exit code in `tito_fast.errors.CATALOGUE` (set there).
    code: ClassVar[str]
    exit_code: ClassVar[int]

    argument: str
    """The parameter name; rows of batches as `a_seqs[3]`."""
    position: int | None
    """Index of the offending id within that argument, or None."""

class PrefixMismatchError(ValueError):
    """The stored ids are not a prefix of the new ids: the TITO invariant is broken.

    Example:
        >>> import tito_fast
        >>> try:
        ...     tito_fast.check_prefix([1, 2, 3], [1, 9, 3, 4])
        ... except tito_fast.PrefixMismatchError as e:
        ...     (e.index, e.matched, e.checked_len)
        (1, 1, 3)
    """

    #: Its code and exit code in `tito_fast.errors.CATALOGUE` (set there).
    code: ClassVar[str]
    exit_code: ClassVar[int]

    index: int
    """First mismatching index (the new length when the new ids end early)."""
    matched: int
    """Number of leading ids that matched."""
    checked_len: int
    """Number of stored ids checked: `stored_len - max_trim_tokens`."""
    stored_len: int
    new_len: int
    max_trim_tokens: int

class TokenBufferError(ValueError):
    """A TokenBuffer operation that cannot apply (e.g. rolling back too far).

    Example:
        >>> import tito_fast
        >>> try:
        ...     tito_fast.TokenBuffer([1]).rollback(1)
        ... except tito_fast.TokenBufferError as e:
        ...     str(e)
        'cannot roll back 1 checkpoint(s): the buffer has 0'
    """

    #: Its code and exit code in `tito_fast.errors.CATALOGUE` (set there).
    code: ClassVar[str]
    exit_code: ClassVar[int]

def common_prefix_len(a: _TokenIds, b: _TokenIds) -> int:
    """Length of the longest common prefix of two token sequences.

    Both sequences are validated in full, not only up to the divergence.

    Example:
        >>> import numpy as np, tito_fast
        >>> tito_fast.common_prefix_len(np.array([5, 6, 7], dtype=np.int32), [5, 6, 8])
        2
    """

def check_prefix(stored: _TokenIds, new: _TokenIds, *, max_trim_tokens: int = 0) -> None:
    """The token-level TITO check: `stored`, less up to `max_trim_tokens` trailing ids, must start `new`.

    An empty `stored`, or `max_trim_tokens >= len(stored)`, always passes.

    Raises:
        PrefixMismatchError: with the first mismatching index and the lengths.

    Example:
        >>> import tito_fast
        >>> tito_fast.check_prefix([1, 2, 3], [1, 2, 3, 4])  # passes: returns None
        >>> tito_fast.check_prefix([1, 2, 99], [1, 2, 3], max_trim_tokens=1)  # last id may differ
    """

def common_prefix_len_batch(
    a_seqs: Iterable[_TokenIds], b_seqs: Iterable[_TokenIds], *, threads: int | None = None
) -> npt.NDArray[np.int64]:
    """Common prefix length of each pair `(a_seqs[i], b_seqs[i])`, computed in parallel.

    Args:
        a_seqs: token sequences (a list of lists or arrays, or a 2-D array's rows).
        b_seqs: as many token sequences.
        threads: worker threads; None uses one per core; more than the cores are clamped to the
            core count (pools are kept by size, at most 4: the threads stay within 4 x cores).

    Example:
        >>> import tito_fast
        >>> tito_fast.common_prefix_len_batch([[1, 2], [3, 4]], [[1, 2, 5], [9]]).tolist()
        [2, 0]
    """

def common_prefix_len_csr(
    a_values: _TokenIds,
    a_offsets: Sequence[SupportsIndex] | npt.NDArray[np.integer[Any]],
    b_values: _TokenIds,
    b_offsets: Sequence[SupportsIndex] | npt.NDArray[np.integer[Any]],
    *,
    threads: int | None = None,
) -> npt.NDArray[np.int64]:
    """Common prefix length of each row of two CSR batches, computed in parallel.

    Row i of side a is `a_values[a_offsets[i]:a_offsets[i+1]]` (the layout of
    an Arrow list column: `arr.values`, `arr.offsets`). Both sides must have
    the same number of rows; offsets must be non-decreasing and within the values.

    Example:
        >>> import numpy as np, tito_fast
        >>> tito_fast.common_prefix_len_csr([1, 2, 3, 4], [0, 2, 4], [1, 2, 4, 4], [0, 2, 4]).tolist()
        [2, 0]
    """

def trim_trailing(ids: _S, trim_ids: Iterable[SupportsIndex]) -> _S:
    """Strip every trailing id found in `trim_ids` (repeatedly); returns `ids[:n]`.

    The result is the same kind of sequence as `ids`: a list for a list, a
    view for a numpy array (a list when `ids` cannot be sliced).

    Example:
        >>> import tito_fast
        >>> tito_fast.trim_trailing([7, 8, 198, 198], {198})
        [7, 8]
    """

@overload
def merge_tokens(  # type: ignore[overload-overlap]
    prefix: npt.NDArray[Any],
    incremental: _TokenIds,
    *,
    append_after: tuple[SupportsIndex, SupportsIndex | _TokenIds] | None = None,
    drop_last_if_in: Iterable[SupportsIndex] | None = None,
) -> npt.NDArray[Any]:
    """`prefix` with a family's seam rule applied, followed by `incremental`.

    Args:
        prefix: the stored ids (prompt + completion of the previous turn).
        incremental: ids of the messages appended since.
        append_after: `(X, Y)`: when the prefix ends with X, append Y (one id
            or several). Qwen3: `(<|im_end|>, "\\n")`.
        drop_last_if_in: drop the prefix's last id when it is in this set
            (applied before `append_after`). GLM-4.7: `{<|observation|>, <|user|>}`.

    Returns:
        A list, or a numpy array of the prefix's dtype when `prefix` is one.

    Example:
        >>> import tito_fast
        >>> tito_fast.merge_tokens([9, 151645], [151644], append_after=(151645, 198))
        [9, 151645, 198, 151644]
    """


@overload
def merge_tokens(
    prefix: _TokenIds,
    incremental: _TokenIds,
    *,
    append_after: tuple[SupportsIndex, SupportsIndex | _TokenIds] | None = None,
    drop_last_if_in: Iterable[SupportsIndex] | None = None,
) -> list[int]: ...

@final
class TokenBuffer:
    """An append-only sequence of token ids for one session, with checkpoints.

    A checkpoint is a length, not a copy: a session of T turns costs
    O(total ids) memory. `replace_last` (a boundary swap) records what it
    removes so rollbacks restore every checkpoint exactly. Safe to share
    between threads; pickles (e.g. to Ray workers).

    Example:
        >>> import tito_fast
        >>> buf = tito_fast.TokenBuffer([1, 2, 3])
        >>> buf.checkpoint()
        3
        >>> buf.extend([4, 5]); buf.checkpoint()
        5
        >>> buf.rollback()  # back to the first checkpoint
        3
        >>> buf.to_list()
        [1, 2, 3]
    """

    def __new__(cls, ids: _TokenIds | None = None) -> Self: ...
    def extend(self, ids: _TokenIds) -> None:
        """Append token ids."""
    def checkpoint(self) -> int:
        """Record the current length as a checkpoint and return it."""
    def rollback(self, n_checkpoints: int = 1) -> int:
        """Drop the `n_checkpoints` newest checkpoints; restore the ids of the newest one left.

        Ids appended after that checkpoint are discarded (all ids when none is
        left); `rollback(0)` discards only ids added since the newest
        checkpoint. Returns the new length.

        Raises:
            TokenBufferError: when there are fewer checkpoints; nothing changes.
        """
    def replace_last(self, n: int, ids: _TokenIds) -> None:
        """Remove the last `n` ids and append `ids` in their place.

        Raises:
            TokenBufferError: when `n` exceeds the length; nothing changes.
        """
    @property
    def checkpoints(self) -> list[int]:
        """Lengths recorded by `checkpoint()`, oldest first."""
    @property
    def nbytes(self) -> int:
        """Bytes owned by the buffer: id capacity, checkpoints and undo records."""
    def to_list(self) -> list[int]:
        """The ids as a new list."""
    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> npt.NDArray[Any]:
        """`np.asarray(buf)` is the same zero-copy view as `to_numpy()`."""
    def to_numpy(self) -> npt.NDArray[np.uint32]:
        """The ids as a read-only uint32 array that shares the buffer's memory.

        Later changes to the buffer never show in an array already returned.
        """
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[int]: ...
    @overload
    def __getitem__(self, index: SupportsIndex, /) -> int: ...
    @overload
    def __getitem__(self, index: slice, /) -> list[int]: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __reduce__(self) -> tuple[Any, ...]: ...
    def __setstate__(self, state: tuple[bytes, list[int], list[tuple[int, int, bytes]]], /) -> None: ...

#: The verdict codes of `Alignment.verdicts` (`tito_fast.compare.alignment.Verdict` names them).
VERDICT_UNKNOWN: Final[int]
VERDICT_SAME_TEXT: Final[int]
VERDICT_SPECIAL_TYPE: Final[int]
VERDICT_ASSISTANT_TEXT: Final[int]
VERDICT_NON_ASSISTANT_TEXT: Final[int]

@final
class Alignment:
    """How two id sequences' segments line up (`Segmenter.align`).

    `kind` is "aligned" (same segment structure), "count" (segment counts
    differ) or "pattern" (same count, other special/content pattern).
    `differing` lists the aligned pairs whose ids differ (empty unless
    aligned); `verdicts[i]` classifies pair `differing[i]` (`VERDICT_*`):
    same text from other ids, special ids differ, assistant text differs,
    other text differs, or unknown (no byte table, an unknown id, a
    character split at a segment edge). Segment i of a side is
    `ids[starts[i]:starts[i+1]]` (after trimming), special or content.
    `texts[i]` holds the pair's `(expected, actual)` UTF-8 texts when it is
    reported and the byte table knows them, else None.

    Example:
        >>> import tito_fast
        >>> a = tito_fast._core.Segmenter({9}).align([1, 9, 2], [1, 9, 3])
        >>> a.kind, a.differing.tolist(), a.expected_starts.tolist()
        ('aligned', [2], [0, 1, 2, 3])
    """

    @property
    def kind(self) -> str: ...
    @property
    def differing(self) -> npt.NDArray[np.int64]: ...
    @property
    def verdicts(self) -> npt.NDArray[np.int8]: ...
    @property
    def expected_starts(self) -> npt.NDArray[np.int64]: ...
    @property
    def expected_special(self) -> npt.NDArray[np.bool_]: ...
    @property
    def actual_starts(self) -> npt.NDArray[np.int64]: ...
    @property
    def actual_special(self) -> npt.NDArray[np.bool_]: ...
    @property
    def texts(self) -> list[tuple[bytes, bytes] | None]: ...

@final
class RoleMarkers:
    """A chat format's message markers by token id, and the role table of an
    id sequence (the rule `tito_fast.compare.roles.RoleTracker` applies).

    Example:
        >>> import tito_fast
        >>> m = tito_fast._core.RoleMarkers({}, {1: 3}, {})  # 1 opens a block, its role name ends at id 3
        >>> starts, roles = m.table([1, 7, 3, 5], lambda ids: "user" if ids == [7] else "?")
        >>> starts.tolist(), roles
        ([0], ['user'])
    """

    def __new__(cls, fixed: dict[int, str], named: dict[int, int | str], inner: dict[int, str]) -> Self: ...
    def table(
        self, ids: _TokenIds, decode: Any, segmenter: Segmenter | None = None
    ) -> tuple[npt.NDArray[np.int64], list[str]]:
        """`(starts, roles)`: where each message of `ids` starts and its role;
        role names come from `segmenter`'s byte table, else from
        `decode(list_of_ids) -> str` (the tokenizer's decode)."""
        ...

@final
class Segmenter:
    """Segmentation at boundary ids and alignment of two sequences' segments (the comparator's core).

    Example:
        >>> import tito_fast
        >>> seg = tito_fast._core.Segmenter({9})
        >>> starts, special = seg.segment([9, 1, 2, 9])
        >>> starts.tolist(), special.tolist()
        ([0, 1, 3, 4], [True, False, True])
    """

    def __new__(
        cls,
        boundary_ids: Iterable[SupportsIndex],
        byte_offsets: _TokenIds | None = None,
        byte_blob: bytes | None = None,
        added_ids: Iterable[SupportsIndex] | None = None,
    ) -> Self: ...
    @property
    def boundary_ids(self) -> list[int]:
        """The boundary ids, sorted."""
    @property
    def has_byte_table(self) -> bool:
        """Whether a byte table (id i's bytes: `byte_blob[byte_offsets[i]:byte_offsets[i+1]]`) was given."""
    def text_bytes(self, ids: _TokenIds) -> bytes | None:
        """The UTF-8 text of `ids` from the byte table; None when it cannot tell."""
    def byte_len(self, ids: _TokenIds) -> int | None:
        """How many bytes `ids` decode to, from the byte table (what `id_offsets`
        ends with); None without a table or for an id outside it."""
    def id_offsets(self, ids: _TokenIds) -> npt.NDArray[np.int64] | None:
        """Where each of `ids` starts in their decoded bytes, and where the last
        ends (one more entry), from the byte table; None without a table or for
        an id outside it."""
    def segment(self, ids: _TokenIds) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """`(starts, special)`: segment i is `ids[starts[i]:starts[i+1]]`, special or content."""
    def align(
        self,
        expected: _TokenIds,
        actual: _TokenIds,
        trim_ids: Iterable[SupportsIndex] | None = None,
        *,
        assistant_start: bytes | None = None,
        probe_ids: int = 20,
    ) -> Alignment:
        """Trim both tails, segment both and align them (see `Alignment`). A
        content segment opens an assistant message when the special before it
        and its first `probe_ids` ids have a text that starts with
        `assistant_start` (UTF-8 bytes)."""
    def align_batch(
        self,
        expected_seqs: Iterable[_TokenIds],
        actual_seqs: Iterable[_TokenIds],
        trim_ids: Iterable[SupportsIndex] | None = None,
        *,
        assistant_start: bytes | None = None,
        probe_ids: int = 20,
        threads: int | None = None,
    ) -> list[Alignment]:
        """`align` over many pairs, in parallel with the GIL released."""
    def __reduce__(self) -> tuple[Any, ...]: ...

@final
class BpeEncoder:
    """Encodes text as a byte-level BPE tokenizer with a GPT-4 style
    pre-tokenizer does (`add_special_tokens=False`); `pattern` names the
    split: "qwen", "llama3", "qwen35", "deepseek" or "o200k". Built by
    `tito_fast.encoder.FastEncoder`, which checks the tokenizer is covered; use
    that class. Thread-safe; long texts are encoded with the GIL released.

    Example:
        >>> import tito_fast
        >>> vocab = [bytes([b]) for b in range(256)] + [b"he"]
        >>> enc = tito_fast._core.BpeEncoder(
        ...     b"".join(vocab), [*range(257), 258], list(range(257)), [ord("h"), ord("e"), 256],
        ...     ignore_merges=False, pattern="qwen", raw_added=[("<|end|>", 300)], normalized_added=[], nfc=False)
        >>> enc.encode("he<|end|>hi")
        [256, 300, 104, 105]
        >>> enc.pieces("Hello world 12")
        ['Hello', ' world', ' ', '1', '2']
    """

    def __new__(
        cls,
        token_blob: bytes,
        token_offsets: _TokenIds,
        token_ids: _TokenIds,
        merges: _TokenIds,
        *,
        ignore_merges: bool,
        pattern: str,
        raw_added: Sequence[tuple[str, int]],
        normalized_added: Sequence[tuple[str, int]],
        nfc: bool,
    ) -> Self: ...
    def encode(self, text: str) -> list[int] | None:
        """The ids of `text`, or None when the NFC normalizer might change part of it."""
    def pieces(self, text: str) -> list[str]:
        """The pre-tokenizer's pieces of `text` (no added tokens, no normalization)."""
    def clear_cache(self) -> None:
        """Forget the BPE results remembered per piece (up to 65,536 pieces of at most
        64 bytes); ids do not change, the next texts cost what a new encoder's do."""

@final
class AddedTokenSplitter:
    """Splits a text at a tokenizer's added tokens as the tokenizer does before
    encoding: the tokens that are not normalized in the raw text, then the
    normalized ones in the text between, leftmost-longest in each pass.

    Example:
        >>> import tito_fast
        >>> s = tito_fast._core.AddedTokenSplitter([("<|a|>", 7), ("<|a|>x", 8)], [("<t>", 9)])
        >>> s.split("hi<|a|>x y<t>z")
        (['hi', 8, ' y', 9, 'z'], [' y<t>z'])
    """

    def __new__(cls, raw_added: Sequence[tuple[str, int]], normalized_added: Sequence[tuple[str, int]]) -> Self: ...
    def split(self, text: str) -> tuple[list[str | int], list[str]]:
        """`(parts, checked)`: the texts and added-token ids of `text` in order, and
        the first-pass texts in which normalized tokens were found (the tokenizer
        finds those after normalizing, so they must be unchanged by it)."""

class TemplateRenderError(ValueError):
    """The native renderer could not render a chat template as jinja2 does.

    `raised` is True when the template itself called `raise_exception`
    (jinja2 fails the same way); otherwise `reason` says what the native
    renderer does not support, and the caller renders with jinja2.

    Example:
        >>> import tito_fast
        >>> try:
        ...     tito_fast._core.NativeTemplate("{{ raise_exception('no') }}").render({})
        ... except tito_fast._core.TemplateRenderError as e:
        ...     print(e.raised, e.reason)
        True no
    """

    #: Its code and exit code in `tito_fast.errors.CATALOGUE` (set there).
    code: ClassVar[str]
    exit_code: ClassVar[int]

    raised: bool
    reason: str

class TemplateLimitError(ValueError):
    """A chat template passed a limit of the renderer: its fuel (an
    instruction and data budget that grows with the size of the
    conversation), its recursion limit, its output size, or a `range` of more
    than 100000 items. Raised by the native renderer and by tito_fast's
    jinja2 sandbox alike; never rendered another way (docs/templates.md).

    Example:
        >>> import tito_fast
        >>> try:
        ...     tito_fast._core.NativeTemplate("{{ range(10**9)|length }}").render({})
        ... except tito_fast._core.TemplateLimitError as e:
        ...     print(e.reason)
        range() of 1000000000 items (at most 100000) (template line 1)
    """

    code: ClassVar[str]
    exit_code: ClassVar[int]

    reason: str

@final
class NativeTemplate:
    """A chat template compiled for the native (Rust, minijinja) renderer,
    set up as transformers sets up jinja2 (`trim_blocks`, `lstrip_blocks`,
    loop controls, Python's `tojson`, `raise_exception`, `strftime_now`,
    `{% generation %}`, values printed as Python prints them). Thread-safe;
    renders with the GIL released. Raises `TemplateRenderError` when the
    template does not compile. Use `tito_fast.chat.render.render(...,
    backend="native")`, which falls back to jinja2 where needed.

    Example:
        >>> import tito_fast
        >>> t = tito_fast._core.NativeTemplate("{% for m in messages %}{{ m.role }}: {{ m.content|tojson }}\\n{% endfor %}")
        >>> t.render({"messages": [{"role": "user", "content": "héllo"}]})
        'user: "héllo"\\n'
    """

    def __new__(cls, source: str, *, utc_offset: int = 0) -> Self: ...
    def render(self, context: dict[str, Any]) -> str:
        """The template rendered with `context` (its variables)."""
    def render_many(self, contexts: list[dict[str, Any]], *, threads: int | None = None) -> list[str | TemplateRenderError]:
        """Every context rendered on `threads` threads (None: all cores); failures are returned, not raised."""
    def render_encode_many(
        self, contexts: list[dict[str, Any]], encoder: BpeEncoder, *, threads: int | None = None
    ) -> list[npt.NDArray[np.uint32] | TemplateRenderError | None]:
        """Every context rendered and encoded (None: the encoder does not cover that text)."""

@final
class CheckedSession:
    """A session the native check found differing from its render: what the
    diagnosis needs of its record (never converted whole), and the renders of its
    message prefixes as the check rendered the whole (same normalised messages,
    tools and variables), for `compare.messages.MessageBounds`. Made by
    `SessionChecker.check_lines`.

    Example:
        >>> session = checker.check_lines([line])[0][4]  # doctest: +SKIP
        >>> session.render_prefix(1)  # doctest: +SKIP
        b'<|im_start|>system\\nYou are a coding agent.<|im_end|>\\n'
    """

    @property
    def session_id(self) -> str | None:
        """The record's session_id (None: it has none)."""
    @property
    def roles(self) -> list[str]:
        """Each message's role."""
    @property
    def alignment(self) -> Alignment | None:
        """The alignment of the render's ids with the session's, as the scorer's
        comparator aligns them, made on the check's threads (None: the checker
        was built without `roles`)."""
    @property
    def expected_table(self) -> tuple[npt.NDArray[np.int64], list[str]] | None:
        """`(starts, roles)` of the render's ids (trimmed as the alignment trims
        them), as `RoleMarkers.table` reads them, made on the check's threads
        (None: not made, or a role name the byte table cannot tell)."""
    @property
    def turns(self) -> int:
        """How many assistant messages."""
    @property
    def first_difference(self) -> tuple[int, int] | None:
        """`(i, byte)`: the render's id i is the first that differs from the
        session's (the last id when one side is a prefix of the other, trimmed
        ids aside) and starts at `byte` of the render; None when the render's
        ids do not decode to it byte for byte, or the checker has no segmenter with a
        byte table (a tokenizer that is not byte-exact)."""
    @property
    def metadata(self) -> Any:
        """The record's metadata as json.loads gives it."""
    def render_prefix(self, k: int, *, then_user: str | None = None) -> bytes:
        """The render (UTF-8 bytes) of the first `k` messages, then a user message
        holding `then_user` when given. Raises `TemplateRenderError` / `TemplateLimitError`."""
    def message_bounds(
        self,
        *,
        render_prefix: Callable[[int], str | bytes] | None = None,
        render_history: Callable[[int], str | bytes] | None = None,
    ) -> MessageBounds:
        """Which message each byte of the render belongs to: a `MessageBounds`
        whose prefixes this session renders natively (the GIL released), with
        what the check found already known (the first difference's message,
        found on the check's threads); a prefix the native renderer hands to
        jinja2 is rendered by `render_prefix(k)` (history: `render_history(k)`)."""

@final
class MessageBounds:
    """Which message of a conversation each byte of its render belongs to,
    from the renders of its message prefixes (see `tito_fast.compare.messages`;
    the rule is written once, in `rust/src/bounds.rs`). A render callable
    that raises an `Exception` refuses that prefix; one that calls these
    bounds again, or two threads using them at once, get a RuntimeError.
    Bytes and k are ints (a negative byte is before every message).

    Example:
        >>> from tito_fast._core import MessageBounds
        >>> b = MessageBounds(lambda k: "ab"[:k], 2, b"ab")
        >>> b.message_at(0), b.message_at(1)
        (0, 1)
    """

    def __new__(
        cls,
        render_prefix: Callable[[int], str | bytes],
        n: int,
        text: bytes,
        *,
        openers: list[bytes] | None = None,
        first_role: str | None = None,
        render_history: Callable[[int], str | bytes] | None = None,
    ) -> Self: ...
    @property
    def n(self) -> int:
        """How many messages."""
    @property
    def text(self) -> bytes:
        """The render of all the messages (UTF-8)."""
    def known(self) -> list[tuple[int, int]]:
        """The prefix lengths known so far, `[(k, bytes), ...]`, by k."""
    def prefix_len(self, k: int) -> int:
        """Bytes of `text` that the render of `messages[:k]` covers."""
    def message_at(self, byte: int, hint: int | None = None) -> int:
        """The index of the message whose render holds byte `byte` of `text`
        (-1: before any message); `hint`, a guess tried first."""
    def known_message_at(self, byte: int) -> int | None:
        """`message_at(byte)` from the prefix lengths known so far, without a
        render (None: they do not tell, or do not grow with the prefix)."""

def block_messages(block_roles: Sequence[str], message_roles: Sequence[str]) -> list[int] | None:
    """A guess of the message each rendered block starts with, for
    `MessageBounds.message_at`'s hint (None: neither count fits).

    Example:
        >>> from tito_fast._core import block_messages
        >>> block_messages(["system", "user", "assistant"], ["user", "assistant"])
        [-1, 0, 1]
    """

@final
class SessionChecker:
    """The session check of `tito-fast score` for JSONL dump lines, in Rust:
    each line is parsed, validated, normalised as `tito_fast.chat.render`
    does, rendered by a `NativeTemplate`, encoded by a `BpeEncoder` and
    compared with the session's ids (after the trailing trim), on threads
    with the GIL released. Anything it does not take on exactly as the
    Python path would comes back as None (score that line in Python). Built
    by `tito_fast.score.Scorer`; use that class.

    Example:
        >>> from tito_fast.score import Scorer  # doctest: +SKIP
        >>> Scorer(tok, "qwen3").native.check_lines([line])  # doctest: +SKIP
        [('clean', 's0', 50, 14018, None)]
    """

    def __new__(
        cls,
        template: NativeTemplate,
        encoder: BpeEncoder,
        *,
        variables: dict[str, Any],
        tool_policy: str,
        trim_ids: list[int],
        vocab_size: int,
        family: str,
        openers: list[bytes] | None = None,
        segmenter: Segmenter | None = None,
        roles: RoleMarkers | None = None,
        assistant_start: bytes | None = None,
        probe_ids: int | None = None,
    ) -> Self:
        """`openers` (the role tracker's block openers) and `segmenter` (with
        its byte table): a differing session's first difference is placed on
        the check's threads (`CheckedSession.message_bounds`); with `roles` too
        (the tracker's `RoleMarkers`; needs `segmenter`) the session is aligned
        (`Segmenter.align` with `trim_ids`, `assistant_start`, `probe_ids`:
        default 20) and its render's role table read there
        (`CheckedSession.alignment`, `expected_table`)."""
    def check_lines(
        self, lines: list[bytes], *, threads: int | None = None
    ) -> list[
        tuple[str, str | None, int, int, str | None]
        | tuple[str, str, str | None, str]
        | tuple[str, bytes, npt.NDArray[np.uint32], npt.NDArray[np.uint32], CheckedSession]
        | None
    ]:
        """Per line: None (Python path), ("bad", reason, session_id) (the one reader's
        verdict), ("clean", session_id, turns, num_ids, metadata JSON) or ("differs",
        text, expected ids, session ids, session): the render (UTF-8 bytes), its ids,
        the session's ids, and a `CheckedSession` (what the diagnosis needs of the record; it renders
        the message prefixes). Every id of a session the check takes is below `vocab_size`
        (a record or render with one outside goes to the Python path)."""
    def check_rows(
        self, rows: list[dict[str, Any]], *, threads: int | None = None
    ) -> list[
        tuple[str, str | None, int, int, str | None]
        | tuple[str, str, str | None, str]
        | tuple[str, bytes, npt.NDArray[np.uint32], npt.NDArray[np.uint32], CheckedSession]
        | None
    ]:
        """`check_lines` for rows (dicts of a Parquet dump's columns: messages, tools and
        metadata as JSON text, ids as arrays or lists), read by `read_dump_row`'s rules."""
    def explain(self, line: bytes) -> str | None:
        """Why the check hands `line` to the Python path (None: it takes it)."""


def assemble_calls(
    prompts: Sequence[npt.ArrayLike]
    | tuple[npt.NDArray[np.uint32], npt.NDArray[np.int64]]
    | tuple[Sequence[npt.NDArray[np.uint32]], Sequence[npt.NDArray[np.int64]]],
    completion: npt.NDArray[np.uint32] | Sequence[npt.ArrayLike],
    completion_offsets: npt.NDArray[np.int64] | None,
    logprobs: npt.NDArray[np.float32] | Sequence[npt.NDArray[np.float32] | None],
    session_offsets: npt.NDArray[np.int64],
    *,
    order: npt.NDArray[np.int64] | None = None,
    trim_ids: Sequence[int],
    max_trim: int,
    realign_window: int,
    policy: tuple[str, str, str, str],
    boundary_ids: Sequence[int],
    length: npt.NDArray[np.bool_] | None = None,
    hints: npt.NDArray[np.int64] | None = None,
    leaves: str = "all",
    threads: int | None = None,
) -> dict[str, npt.NDArray[Any]]:
    """Captured calls of many sessions to chains, on threads with the GIL released
    (`tito_fast.assemble` is the API). `prompts`: one id sequence per call
    (uint32 arrays are read in place, other ids converted; an error names
    `prompts[i]`), or one CSR batch (values, offsets) read in place, whose values and
    offsets may be lists of chunks (an Arrow list column's); completions as CSR rows (flat
    ids, offsets), `logprobs` aligned with `completion` (NaN: none), or, with
    `completion_offsets` None, one id sequence and one float32 array (None: none) per call; `order`: the
    call rows to assemble in session and call order (None: all, as given);
    `session_offsets` cuts the ordered calls into sessions; `policy`: of seam drift, rollback, rewrite, new root;
    `length`: per call row, its completion ended on `finish_reason="length"` (None: none did);
    `hints`: per call row, the row of the earlier call of its session whose conversation its messages
    extend (-1: none): the call is classified against that call's chain when it extends none;
    `leaves`: "all" or "drop_retries" (attempts a retry superseded are dropped and counted).
    Returns arrays: ids, loss_mask, logprobs, chain_session, chain_offsets,
    chain_open, chain_last_call, chain_prompt_len, chain_parent, chain_shared, span_offsets, span_start, span_call, call_chain, event_*.

    Example:
        >>> import numpy as np
        >>> from tito_fast._core import assemble_calls
        >>> out = assemble_calls([np.array([1, 2], np.uint32)], np.array([3], np.uint32),
        ...     np.array([0, 1]), np.array([0.5], np.float32), np.array([0, 1]), trim_ids=[], max_trim=0,
        ...     realign_window=8, policy=("realign", "fork", "fork", "fork"), boundary_ids=[])
        >>> out["ids"].tolist(), out["loss_mask"].tolist()
        ([1, 2, 3], [0, 0, 1])
    """
