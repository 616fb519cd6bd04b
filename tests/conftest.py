"""Shared test setup: hypothesis profiles and the token-input kinds."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile(
    "ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.register_profile("thorough", max_examples=3000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# The tokenizer tables' cache (`tito_fast.tokenizer.cache`) of this run: a
# fresh folder, so that tests see what a first run and a warm run do, never
# tables another checkout left (child processes inherit it).
if "TITO_FAST_TABLES" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="tito-fast-test-cache-")
    os.environ["TITO_FAST_TABLES"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
