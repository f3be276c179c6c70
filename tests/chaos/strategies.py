"""Hypothesis strategies shared by the chaos fuzz tests."""

from __future__ import annotations

from hypothesis import strategies as st

#: Any JSON value (no NaN or infinity: they are not JSON), nested a little.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=15,
)
