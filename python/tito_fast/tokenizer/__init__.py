"""Facts about one tokenizer: its backend and special ids, the per-id byte table
(`Vocab`), the exact Rust encoder (`FastEncoder`) and the added-token split.

This layer imports only the Rust core (`tito_fast._core`).
"""

from tito_fast.tokenizer.encoder import FastEncoder
from tito_fast.tokenizer.vocab import Vocab

__all__ = ["FastEncoder", "Vocab"]
