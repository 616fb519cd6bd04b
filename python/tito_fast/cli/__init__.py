"""The `tito-fast` command line: `cli(*args)` for tests, `main()` for the script."""

import os

# transformers' start-up advice ("PyTorch was not found ...") and loader
# notes are noise on a command line that never needs a model.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

from tito_fast.cli.main import EXIT_CODES, cli, main  # noqa: E402

__all__ = ["EXIT_CODES", "cli", "main"]
