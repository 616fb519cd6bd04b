"""Which family a tokenizer belongs to, when its chat template says so.

Used when a user gives no `--family`: a template is identified only when it
is byte-identical to a published one (Miles' fixed templates, the stock
templates of the checkpoints in `docs/families.md`) or, for DeepSeek V3.2/V4,
which ship no template, when the model folder's `config.json` names the model
type. Anything else is not guessed: the caller asks for `--family`.

Example:
    >>> from tito_fast.chat.identify import family_of_template
    >>> family_of_template("{{ messages }}") is None
    True
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tito_fast.chat.templates import FIXED_TEMPLATES, identify

#: sha256 of published stock chat templates -> (family, what the template is).
STOCK_SHA256: dict[str, tuple[str, str]] = {
    "a55ee1b1660128b7098723e0abcd92caa0788061051c62d51cbe87d9cf1974d8": ("qwen3", "Qwen3's stock template"),
    "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715": ("qwen35", "Qwen3.5's stock template"),
    "cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f": ("qwen25", "Qwen2.5's stock template"),
    "d63ad536c3c81880043e22ec7fd08db42b4d8fb7c89c7138bc562bfa25281375": ("glm47", "GLM-4.7's stock template"),
    "45a1d5635afd3d8e08a28866e72fc8395d2a7ec30989fd0bdaec6dd45a99eff0": ("glm47", "GLM-5's stock template"),
    "03b1bbff20331e54647c68167e8ac7f0b5b7ceb40ead372f44826624a9ad79cd": ("glm47", "GLM-5.1's stock template"),
    "172dc74a35e1752df75ecfb2b2cf9326d2852bb1379868ebeec9571654489679": ("glm47", "GLM-5.2's stock template"),
    "893d908f7b5cc65fdde270dcae5ea1a99647c6a7ce572ae874a57b7160069566": ("minimax_m27", "MiniMax-M2.7's stock template"),
    "11421244f67553498e5c8112dae02802025bcc4305ec45ad380af95c96f9fe64": ("minimax_m27", "MiniMax-M3's stock template"),
    "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65": ("llama3", "Llama 3.1's stock template"),
    "ab7813c3abdd9cb655905a410728b26c7884eca45ddfab8d9f931553485a7862": ("nemotron3", "Nemotron 3's stock template"),
    "5b8f31f11198696548d544dbe424a3c1ef244d00a475f4e1bffb351fda085608": ("mistral", "Mistral Small 3.2's template (llama.cpp's copy)"),
    "39f03c383413f531fd302c06c7e982ad98c83f0657a8339ae25478ccb81fdcda": ("mistral", "Ministral 3 Reasoning's template (llama.cpp's copy)"),
    "039a4710e2aabaa79e85a233fa3daa4fbc030a4a8dc218cb7f34fb0c4b8c13b1": ("mistral", "Devstral Small's template (llama.cpp's copy)"),
}

#: `config.json` model types of template-less checkpoints -> family.
MODEL_TYPES: dict[str, str] = {"deepseek_v32": "deepseekv32", "deepseek_v4": "deepseekv4"}


def family_of_template(template: str) -> tuple[str, str] | None:
    """`(family, why)` when `template` is a published template of one family, else None."""
    fixed = identify(template)
    if fixed is not None:
        family = next(f for f, name in FIXED_TEMPLATES.items() if name == fixed)
        return family, f"its chat template is Miles' {fixed}"
    digest = hashlib.sha256(template.encode("utf-8")).hexdigest()
    if digest in STOCK_SHA256:
        family, what = STOCK_SHA256[digest]
        return family, f"its chat template is {what}"
    return None


def family_of_tokenizer(tokenizer: Any) -> tuple[str, str] | None:
    """`(family, why)` when the tokenizer's chat template (or, without one, its
    folder's `config.json` model type) identifies exactly one family, else None."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    if isinstance(template, str) and template:
        return family_of_template(template)
    folder = Path(str(getattr(tokenizer, "name_or_path", "") or ""))
    config = folder / "config.json"
    if not config.is_file():
        return None
    try:
        model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    if model_type in MODEL_TYPES:
        return MODEL_TYPES[model_type], f"it has no chat template and config.json names model type {model_type!r}"
    return None


__all__ = ["MODEL_TYPES", "STOCK_SHA256", "family_of_template", "family_of_tokenizer"]
