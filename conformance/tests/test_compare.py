"""The failure message of a value mismatch: output name, count, first differing index with both values,
NaN and Inf spelled out; NaN where NaN is expected and equal infinities count as equal."""

from __future__ import annotations

import numpy as np
from ort_conformance.compare import mismatch

WHERE = "data set 0 output 'y'"


def test_equal_values_nan_and_same_infinities_match():
    e = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
    assert mismatch(e, e.copy(), 1e-3, 1e-7, WHERE) is None
    assert mismatch(e, e + np.float32(1e-5), 1e-3, 1e-4, WHERE) is None  # within tolerance


def test_first_index_both_values_and_count():
    e = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = e.copy()
    g[1, 2], g[2, 3] = 60.0, 12.5
    m = mismatch(e, g, 1e-3, 1e-7, WHERE)
    assert m.startswith(f"{WHERE}: 2 of 12 values differ (rtol 0.001, atol 1e-07)")
    assert "first at index [1, 2]: got 60.0, expected 6.0" in m
    assert "largest finite difference 54.0 at index [1, 2]" not in m  # the first one already says it
    assert "values differ" in m


def test_largest_difference_named_when_not_the_first():
    e = np.zeros(4, np.float32)
    g = np.array([0, 1, 0, 5], np.float32)
    assert "first at index [1]: got 1.0, expected 0.0; largest finite difference 5.0 at index [3]" in \
        mismatch(e, g, 1e-3, 1e-7, WHERE)


def test_nan_against_a_number_both_ways():
    e = np.array([1.0, 2.0, np.nan], np.float32)
    got_nan = mismatch(e, np.array([1.0, np.nan, np.nan], np.float32), 1e-3, 1e-7, WHERE)
    assert "1 of 3 values differ" in got_nan and "first at index [1]: got nan, expected 2.0" in got_nan
    assert "NaN or Inf in 1 of them" in got_nan
    expected_nan = mismatch(e, np.array([1.0, 2.0, 3.0], np.float32), 1e-3, 1e-7, WHERE)
    assert "first at index [2]: got 3.0, expected nan" in expected_nan


def test_infinities_of_opposite_sign_and_against_numbers():
    e = np.array([[np.inf, -np.inf], [1.0, -np.inf]], np.float64)
    g = np.array([[np.inf, np.inf], [1.0, -87.33655]], np.float64)
    m = mismatch(e, g, 1e-3, 1e-7, WHERE)
    assert "2 of 4 values differ" in m and "first at index [0, 1]: got inf, expected -inf" in m
    assert "NaN or Inf in 2 of them" in m and "largest finite" not in m
    assert mismatch(np.array([np.inf]), np.array([1e308]), 1e-3, 1e-7) is not None


def test_float32_values_print_in_shortest_form():
    m = mismatch(np.array([0.1], np.float32), np.array([0.2], np.float32), 1e-3, 1e-7, WHERE)
    assert "got 0.2, expected 0.1" in m


def test_scalars_integers_booleans_and_strings():
    assert "first at the scalar: got 2.0, expected 1.0" in mismatch(np.float32(1), np.float32(2), 1e-3, 1e-7)
    ints = mismatch(np.array([1, 2, 3]), np.array([1, 5, 4]), 0, 0, WHERE)
    assert ints == f"{WHERE}: 2 of 3 values differ; first at index [1]: got 5, expected 2"
    assert "got False, expected True" in mismatch(np.array([True]), np.array([False]), 0, 0)
    text = mismatch(np.array(["a", "b"]), np.array(["a", "c"], dtype=object), 0, 0, WHERE)
    assert text == f"{WHERE}: 1 of 2 string values differ; first at index [1]: got 'c', expected 'b'"


def test_dtype_and_shape_are_checked_first():
    e = np.zeros((2, 3), np.float32)
    assert mismatch(e, e.astype(np.float64), 1e-3, 1e-7, WHERE) == f"{WHERE}: dtype float64, expected float32"
    assert mismatch(e, e.reshape(3, 2), 1e-3, 1e-7, WHERE) == f"{WHERE}: shape [3, 2], expected [2, 3]"


def test_sequences_name_the_element():
    m = mismatch([np.zeros(2, np.float32)], [np.array([0, np.nan], np.float32)], 1e-3, 1e-7, WHERE)
    assert m.startswith(f"{WHERE}[0]: 1 of 2 values differ") and "got nan, expected 0.0" in m
