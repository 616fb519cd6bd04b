"""`python -m tito_fast` runs the command line."""

from tito_fast.cli.main import main

main()
