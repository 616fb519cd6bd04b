"""Benchmark setup.

With `--benchmark-disable` (the default in pyproject's addopts) every
benchmark runs once as a test, on reduced sizes, and checks its result.
With `--benchmark-enable` (see `make bench`) they run at full size, and a
debug build of the extension is refused: its timings would be meaningless.
"""

from __future__ import annotations

import pytest

import tito_fast


def benchmarks_enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("benchmark_enable")) or not bool(config.getoption("benchmark_disable"))


def pytest_configure(config: pytest.Config) -> None:
    if benchmarks_enabled(config) and tito_fast.build_profile != "release":
        raise pytest.UsageError(
            "refusing to benchmark a debug build of tito_fast; build with `maturin develop --release` or `make bench`"
        )


@pytest.fixture(scope="session")
def full_size(request: pytest.FixtureRequest) -> bool:
    """True when timing for real; False when benchmarks run as quick tests."""
    return benchmarks_enabled(request.config)
