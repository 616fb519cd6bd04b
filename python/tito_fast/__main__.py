"""`python -m tito_fast` and the `tito-fast` script: the command line.

The command's own process settings that must come before any import are
made here (`main`), never where a library user's import would make them.
"""

import os

#: The variables OpenBLAS reads for its thread count, in its order.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def main() -> None:
    """Entry point of the `tito-fast` script (and of `python -m tito_fast`).

    numpy's OpenBLAS starts a thread per core when numpy is imported, and
    each spins before it sleeps: the command never multiplies matrices, and
    on 2 cores those threads took 0.1 s of CPU from a 5-session run (0.25 s
    wall against 0.22 s with one). So the command asks OpenBLAS for one
    thread, unless the user set a thread count of their own (an empty value
    is none). The setting is the process's environment: the command's
    worker processes inherit it."""
    if not any(os.environ.get(v) for v in BLAS_THREAD_VARIABLES):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    from tito_fast.cli.main import main as run  # numpy is imported from here on

    run()


if __name__ == "__main__":
    main()
