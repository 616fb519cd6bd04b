"""An exact, faster `tokenizer.encode(text, add_special_tokens=False)` for
byte-level BPE tokenizers with GPT-4 style pre-tokenizers (Qwen2/3/3.5,
Llama 3, GLM-4.x, Kimi K2, Nemotron, DeepSeek V3/V3.1/V3.2/V4, MiniMax M2.x).

The Rust `BpeEncoder` does what the `tokenizers` library does, in the same
order: split at added tokens (two passes: tokens not normalized, then
normalized ones), split each text piece with the pre-tokenizer's pattern
(matched by hand, not by a regex engine), then byte-level BPE on each piece.
It is only built for tokenizers whose JSON it covers exactly; anything else
(another pattern or normalizer, added tokens that strip whitespace, BPE
dropout, truncation) gets `reason` set and every call goes to the
tokenizer. A text the NFC normalizer might change also goes to the
tokenizer, so the ids are always the tokenizer's.

Building checks the encoder against the tokenizer on probe texts; the test
suite checks it on every code point and on random and rendered texts.

Example:
    >>> from tito_fast import fixtures
    >>> enc = FastEncoder.for_tokenizer(fixtures.load_tokenizer("qwen3"))  # doctest: +SKIP
    >>> enc.reason is None, enc.encode("Hello world")  # doctest: +SKIP
    (True, [9707, 1879])
"""

from __future__ import annotations

import gc
import json
import threading
import weakref
from typing import Any

import numpy as np

from tito_fast import _deps
from tito_fast._core import BpeEncoder
from tito_fast.tokenizer import cache
from tito_fast.tokenizer.backend import require_backend
from tito_fast.tokenizer.vocab import PROBES, byte_decoder

_LETTERS = r"[^\r\n\p{L}\p{N}]?\p{L}+"
#: Pre-tokenizer patterns the Rust splitter matches by hand, by their exact text.
PATTERNS = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|" + _LETTERS + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "qwen",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|" + _LETTERS + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "llama3",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "qwen35",
}

#: MiniMax M2.x (GPT-4o's o200k pattern, case-aware). Every character matches it,
#: so MiniMax's split (keep the matches, drop the rest) tiles the text as an
#: isolated split does.
O200K = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

#: DeepSeek V3/V3.1/V3.2/V4: three splits in sequence, each keeping matches and gaps.
DEEPSEEK_SPLITS = [
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
]

#: Texts the encoder must agree with the tokenizer on before it is used.
SELF_CHECK = PROBES + [
    "def f(x):\n    return x  # 12345 ''s 'LL\r\n\r\n\t\u00a0x",
    '{"cmd": "ls -la /tmp", "n": 3.14159}\n\n',
    "caf\u00e9 na\u00efve \u4f60\u597d\u4e16\u754c \U0001f600\U0001f44d\U0001f3fd \u0645\u0631\u062d\u0628\u0627",
    "   trailing   ",
    "HelloWorld JSONParser WE'LL a/b//\n\u01c5x \u02b0a \u6771\u4eac\u30bf\u30ef\u30fc1958",
]


class FastEncoder:
    """See the module doc. Thread-safe; build it with `for_tokenizer` (cached per tokenizer).

    Attributes:
        reason: None when the Rust encoder is used, else why not.
        pattern: the covered splitter's name ("qwen", "llama3", "qwen35",
            "deepseek", "o200k"), or None.
        fallbacks: how many texts went to the tokenizer although the encoder
            covers the tokenizer (texts NFC might change).
        rebuilds: how many times it was rebuilt because the tokenizer changed
            in a way that changes ids: tokens added, truncation, padding or
            the splitting of special tokens turned on or off (checked on every
            call, about 1 µs). Replacing the tokenizer's normalizer,
            pre-tokenizer or model in place is not seen: build a new one.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.backend = require_backend(tokenizer)
        self.fallbacks = 0
        self.rebuilds = 0
        fast = getattr(self.backend, "encode_batch_fast", None)
        self._batch = fast if fast is not None else self.backend.encode_batch
        try:
            self._owner: Any = weakref.ref(tokenizer)
        except TypeError:
            self._owner = lambda: tokenizer
        self._lock = threading.Lock()
        self._setup()

    def _observe(self) -> tuple[Any, ...]:
        """What can change on a live tokenizer and change its ids: added tokens,
        truncation, padding, whether special tokens are split."""
        b = self.backend
        owner = self._owner()
        return (
            b.get_vocab_size(with_added_tokens=True),
            b.truncation is None,
            b.padding is None,
            getattr(b, "encode_special_tokens", False),
            getattr(owner, "split_special_tokens", False),
        )

    def _setup(self) -> None:
        self.reason: str | None = None
        self.pattern: str | None = None
        self._core: BpeEncoder | None = None
        self._state = self._observe()
        if self._state[-1]:
            self.reason = "the tokenizer splits special tokens itself"
            return
        try:
            core = self._cached_core()
        except _Unsupported as e:
            self.reason = str(e)
            return
        for probe in SELF_CHECK:
            mine, theirs = core.encode(probe), self._tokenizer_encode(probe)
            if mine is not None and mine != theirs:
                self.reason = f"disagrees with the tokenizer on {probe!r}"
                return
        self._core = core  # only once checked: other threads may be encoding meanwhile

    @classmethod
    def for_tokenizer(cls, tokenizer: Any) -> FastEncoder:
        """The encoder of `tokenizer`, built once per tokenizer object."""
        with _LOCK:
            try:
                cached = _CACHE.get(tokenizer)
            except TypeError:  # not weak-referenceable
                return cls(tokenizer)
            if cached is None:
                cached = _CACHE[tokenizer] = cls(tokenizer)
            return cached

    @property
    def core(self) -> BpeEncoder | None:
        """The Rust encoder (None when it does not cover the tokenizer), for
        batch calls that encode in Rust; texts it cannot cover it reports as
        such, and the caller then encodes them with `encode`."""
        if self._observe() != self._state:
            self._refresh()
        return self._core

    def encode(self, text: str) -> list[int]:
        """`tokenizer.encode(text, add_special_tokens=False)`, exactly."""
        if self._observe() != self._state:
            self._refresh()
        core = self._core
        if core is not None:
            ids = core.encode(text)
            if ids is not None:
                return ids
            self.fallbacks += 1
        return self._tokenizer_encode(text)

    def _refresh(self) -> None:
        """Rebuild after the tokenizer changed (e.g. `add_tokens`)."""
        with self._lock:
            if self._observe() != self._state:
                self._setup()
                self.rebuilds += 1

    def clear_cache(self) -> None:
        """Forget the BPE results the Rust encoder remembers per piece (for measuring cold encodes)."""
        if self._core is not None:
            self._core.clear_cache()

    def pieces(self, text: str) -> list[str]:
        """The pre-tokenizer's pieces of `text` (the Rust split; for checks)."""
        if self._core is None:
            raise ValueError(f"no Rust encoder for this tokenizer: {self.reason}")
        return self._core.pieces(text)

    def _tokenizer_encode(self, text: str) -> list[int]:
        return list(self._batch([text], add_special_tokens=False)[0].ids)

    def _cached_core(self) -> BpeEncoder:
        """The Rust encoder from its tables: kept on disk by the tokenizer's
        JSON and state (`tokenizer.cache`), else built from the JSON and kept;
        `_Unsupported` when the encoder does not cover the tokenizer (that
        verdict is kept too)."""
        name = cache.key("encoder", cache.digest(self.backend), self._state)
        tables = cache.load(name)
        if tables is not None:
            try:
                return self._core_of(tables)
            except (KeyError, IndexError, UnicodeDecodeError):  # a file of another layout: build the tables again
                pass
        collecting = gc.isenabled()
        gc.disable()  # millions of new objects, none cyclic: collections would only rescan them
        try:
            tables = self._tables(_loads(self.backend.to_str()))
        except _Unsupported as e:  # the verdict is kept, with the pattern when it was read
            tables = {"unsupported": cache.text_array(str(e)), "pattern": cache.text_array(self.pattern or "")}
        finally:
            if collecting:
                gc.enable()
        cache.store(name, tables)
        return self._core_of(tables)

    def _core_of(self, tables: dict[str, np.ndarray]) -> BpeEncoder:
        """The Rust encoder from its tables, or `_Unsupported` (the kept verdict)."""
        self.pattern = cache.array_text(tables["pattern"]) or None if "pattern" in tables else None
        if "unsupported" in tables:
            raise _Unsupported(cache.array_text(tables["unsupported"]))
        try:
            flags = tables["flags"].tolist()
            return BpeEncoder(
                tables["blob"].tobytes(),
                tables["offsets"],
                tables["ids"],
                tables["triples"],
                ignore_merges=bool(flags[0]),
                pattern=cache.array_text(tables["pattern"]),
                raw_added=_added(tables, "raw_added"),
                normalized_added=_added(tables, "normalized_added"),
                nfc=bool(flags[1]),
            )
        except ValueError as e:
            raise _Unsupported(str(e)) from None

    def _tables(self, spec: dict[str, Any]) -> dict[str, np.ndarray]:
        """What the Rust encoder is built from, as arrays (`tokenizer.cache` keeps them)."""
        if self.backend.truncation is not None or self.backend.padding is not None:
            raise _Unsupported("the tokenizer truncates or pads")
        if getattr(self.backend, "encode_special_tokens", False):
            raise _Unsupported("the tokenizer encodes special tokens as text")
        nfc = _normalizer(spec.get("normalizer"))
        pattern = self.pattern = _pre_tokenizer(spec.get("pre_tokenizer"))
        model = spec.get("model") or {}
        if model.get("type") != "BPE":
            raise _Unsupported(f"model {model.get('type')!r} is not BPE")
        for key, ok in [("dropout", (None,)), ("byte_fallback", (False, None)), ("continuing_subword_prefix", (None, "")),
                        ("end_of_word_suffix", (None, ""))]:  # fmt: skip
            if model.get(key) not in ok:
                raise _Unsupported(f"BPE {key}={model.get(key)!r}")
        table = {ord(c): b for c, b in byte_decoder().items()}
        vocab: dict[str, int] = model["vocab"]
        try:
            as_bytes = [tok.translate(table).encode("latin-1") for tok in vocab]
            kept = list(vocab.values())
        except UnicodeEncodeError:
            # Entries with characters outside the byte-level alphabet (DeepSeek keeps its
            # special tokens in the model vocabulary) cannot come out of byte-level
            # pieces or merges of them: leave them out.
            as_bytes, kept = [], []
            for tok, tid in vocab.items():
                mapped = tok.translate(table)
                if max(map(ord, mapped), default=0) < 256:
                    as_bytes.append(mapped.encode("latin-1"))
                    kept.append(tid)
        blob = b"".join(as_bytes)
        offsets = np.zeros(len(as_bytes) + 1, dtype=np.uint64)
        np.cumsum(np.fromiter(map(len, as_bytes), dtype=np.uint64, count=len(as_bytes)), out=offsets[1:])
        ids = np.asarray(kept, dtype=np.uint32)
        merges = model.get("merges") or []
        pairs = [m.split(" ") if isinstance(m, str) else m for m in merges]
        try:
            flat = [i for a, b in pairs for i in (vocab[a], vocab[b], vocab[a + b])]
        except (KeyError, ValueError):
            k, (a, b) = next((k, p) for k, p in enumerate(pairs) if len(p) != 2 or not {p[0], p[1], p[0] + p[1]} <= vocab.keys())
            raise _Unsupported(f"merge {k} ({a!r}, {b!r}) is not two tokens of the vocabulary") from None
        triples = np.array(flat, dtype=np.uint32)
        raw_added: list[tuple[str, int]] = []
        normalized_added: list[tuple[str, int]] = []
        for tok in spec.get("added_tokens") or []:
            if tok.get("lstrip") or tok.get("rstrip") or tok.get("single_word"):
                raise _Unsupported(f"added token {tok['content']!r} strips whitespace or matches single words")
            if not tok["content"]:
                raise _Unsupported(f"added token {tok['id']} is empty")
            if tok.get("normalized"):
                # The tokenizer matches these in its second pass, on normalized text,
                # with their content normalized too.
                content = self.backend.normalizer.normalize_str(tok["content"]) if nfc else tok["content"]
                normalized_added.append((content, int(tok["id"])))
            else:
                raw_added.append((tok["content"], int(tok["id"])))
        return {
            "blob": np.frombuffer(blob, dtype=np.uint8),
            "offsets": offsets,
            "ids": ids,
            "triples": triples,
            "flags": np.array([bool(model.get("ignore_merges", False)), nfc], dtype=np.uint8),
            "pattern": cache.text_array(pattern),
            **_added_arrays("raw_added", raw_added),
            **_added_arrays("normalized_added", normalized_added),
        }


class _Unsupported(Exception):
    pass


def _added_arrays(name: str, tokens: list[tuple[str, int]]) -> dict[str, np.ndarray]:
    """Added tokens (content, id) as arrays: the contents joined with their UTF-8 lengths, and the ids."""
    raw = [c.encode("utf-8") for c, _ in tokens]
    return {
        name: np.frombuffer(b"".join(raw), dtype=np.uint8),
        f"{name}_lengths": np.array([len(r) for r in raw], dtype=np.int64),
        f"{name}_ids": np.array([i for _, i in tokens], dtype=np.int64),
    }


def _added(tables: dict[str, np.ndarray], name: str) -> list[tuple[str, int]]:
    """The inverse of `_added_arrays`."""
    raw = tables[name].tobytes()
    ends = np.cumsum(tables[f"{name}_lengths"]).tolist()
    starts = [0, *ends[:-1]]
    return [(raw[a:b].decode("utf-8"), i) for a, b, i in zip(starts, ends, tables[f"{name}_ids"].tolist())]


def _loads(text: str) -> Any:
    orjson = _deps.orjson_or_none()  # the `score` extra installs it: several times faster on a tokenizer's JSON
    return json.loads(text) if orjson is None else orjson.loads(text)


def _normalizer(spec: dict[str, Any] | None) -> bool:
    """True for NFC, False for none; anything else is not covered."""
    if spec is None:
        return False
    if spec.get("type") == "NFC":
        return True
    if spec.get("type") == "Sequence":
        inner = spec.get("normalizers") or []
        if not inner:
            return False
        if len(inner) == 1:
            return _normalizer(inner[0])
    raise _Unsupported(f"normalizer {json.dumps(spec)[:80]} is not covered")


def _pre_tokenizer(spec: dict[str, Any] | None) -> str:
    """The covered splitter's name, or `_Unsupported`."""
    parts = (spec or {}).get("pretokenizers") if (spec or {}).get("type") == "Sequence" else None
    if not parts or len(parts) < 2:
        raise _Unsupported(f"pre-tokenizer {json.dumps(spec)[:80]} is not a sequence of splits and a byte-level map")
    *splits, level = parts
    if level.get("type") != "ByteLevel" or level.get("add_prefix_space") or level.get("use_regex", True):
        raise _Unsupported(f"pre-tokenizer {json.dumps(level)} is not a plain byte-level map")
    regexes = []
    for split in splits:
        regex = (split.get("pattern") or {}).get("Regex")
        isolated = split.get("behavior") == "Isolated" and not split.get("invert")
        kept = split.get("behavior") == "Removed" and split.get("invert") is True and regex == O200K
        if split.get("type") != "Split" or not (isolated or kept) or regex is None:
            raise _Unsupported(f"pre-tokenizer split {json.dumps(split)[:120]} is not a covered pattern")
        regexes.append(regex)
    if len(regexes) == 1 and regexes[0] in PATTERNS:
        return PATTERNS[regexes[0]]
    if regexes == [O200K]:
        return "o200k"
    if regexes == DEEPSEEK_SPLITS:
        return "deepseek"
    raise _Unsupported(f"pre-tokenizer splits {json.dumps(regexes)[:160]} are not a covered pattern")


_LOCK = threading.Lock()
_CACHE: weakref.WeakKeyDictionary[Any, FastEncoder] = weakref.WeakKeyDictionary()

__all__ = ["FastEncoder", "PATTERNS"]
