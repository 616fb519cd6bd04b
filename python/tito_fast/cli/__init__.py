"""The `tito-fast` command line: `cli(*args)` for tests, `main()` for the script."""

from tito_fast.cli.main import cli, main

__all__ = ["cli", "main"]
