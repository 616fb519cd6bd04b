"""Facts about one tokenizer: loading it (`load`: a folder, `fixture:NAME`, an
object as is), its backend and special ids, the per-id byte table (`Vocab`),
the exact Rust encoder (`FastEncoder`) and the added-token split.

This layer imports only the Rust core (`tito_fast._core`), the errors and
`_deps`, and the pinned fixtures (`tito_fast.testing.fixtures`, which sit in
this layer) for `fixture:NAME`.
"""

from tito_fast.tokenizer.encoder import FastEncoder
from tito_fast.tokenizer.vocab import Vocab

__all__ = ["FastEncoder", "Vocab"]
