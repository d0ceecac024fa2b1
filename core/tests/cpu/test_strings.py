"""String kernels (StringNormalizer, StringSplit, StringConcat, RegexFullMatch) against the reference
evaluator and plain Python string methods."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import run_ours, run_reference


def strings(*values, shape=None):
    arr = np.empty(len(values), dtype=object)
    arr[:] = list(values)
    return arr if shape is None else arr.reshape(shape)


def same_strings(ours, ref):
    """Equal shapes and values; the reference returns '<U' arrays where we return objects."""
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.dtype == object
    assert ours.shape == ref.shape
    assert ours.tolist() == ref.astype(object).tolist()


# --------------------------------------------------------------------------- StringNormalizer

@pytest.mark.parametrize("attrs", [
    dict(is_case_sensitive=1),
    dict(is_case_sensitive=1, stopwords=["monday"], case_change_action="LOWER"),
    dict(is_case_sensitive=1, stopwords=["monday"], case_change_action="UPPER"),
    dict(is_case_sensitive=0, stopwords=["MONDAY"], case_change_action="UPPER"),
    dict(stopwords=["tuesday"], case_change_action="NONE"),
])
@pytest.mark.parametrize("shape", [(4,), (1, 4)])
def test_string_normalizer_matches_reference(attrs, shape):
    x = strings("Monday", "tuesday", "monday", "WEDNESDAY", shape=shape)
    (ours,) = run_ours("StringNormalizer", [x], attrs, opset=10)
    (ref,) = run_reference("StringNormalizer", [x], attrs, opset=10)
    same_strings(ours, ref)


def test_string_normalizer_values():
    x = strings("Monday", "tuesday", "monday", "Wednesday")
    (y,) = run_ours("StringNormalizer", [x], dict(stopwords=["monday"], case_change_action="UPPER"), opset=10)
    assert y.tolist() == ["TUESDAY", "WEDNESDAY"]  # case-insensitive stop words by default
    (y,) = run_ours("StringNormalizer", [x], dict(stopwords=["monday"], is_case_sensitive=1), opset=10)
    assert y.tolist() == ["Monday", "tuesday", "Wednesday"]


@pytest.mark.parametrize("shape, expected", [((2,), [""]), ((1, 2), [[""]])])
def test_string_normalizer_all_dropped(shape, expected):
    x = strings("a", "A", shape=shape)
    (y,) = run_ours("StringNormalizer", [x], dict(stopwords=["a"]), opset=10)
    assert y.dtype == object and y.tolist() == expected


def test_string_normalizer_unicode_case():
    (y,) = run_ours("StringNormalizer", [strings("Über", "straße")], dict(case_change_action="UPPER"), opset=10)
    assert y.tolist() == ["ÜBER", "STRASSE"]


def test_string_normalizer_errors():
    with pytest.raises(KernelError, match=r"\[C\] or \[1, C\]"):
        run_ours("StringNormalizer", [strings("a", "b", "c", "d", shape=(2, 2))], {}, opset=10)
    with pytest.raises(KernelError, match="case_change_action"):
        run_ours("StringNormalizer", [strings("a")], dict(case_change_action="TITLE"), opset=10)
    with pytest.raises(KernelError, match="string tensor"):
        run_ours("StringNormalizer", [np.array([1.0])], {}, opset=10)


# ---------------------------------------------------------------------------------- StringSplit

@pytest.mark.parametrize("x", [
    strings("a,b,,c", ",x", "", "no"),
    strings("  lead  and trail ", "one", "a\tb\nc", shape=(3,)),
    strings("a.b", "c.d.e", "f", "g.h", shape=(2, 2)),
    strings(),
])
@pytest.mark.parametrize("attrs", [{}, dict(delimiter=","), dict(delimiter="."), dict(delimiter=",", maxsplit=1),
                                   dict(delimiter="", maxsplit=1), dict(delimiter="..")])
def test_string_split_matches_reference(x, attrs):
    ours = run_ours("StringSplit", [x], attrs, opset=20, n_outputs=2)
    ref = run_reference("StringSplit", [x], attrs, opset=20, n_outputs=2)
    same_strings(ours[0], ref[0])
    assert ours[1].dtype == np.int64
    np.testing.assert_array_equal(ours[1], ref[1])


def test_string_split_values_and_padding():
    substrings, counts = run_ours("StringSplit", [strings("a-b-c", "d")], dict(delimiter="-"), opset=20, n_outputs=2)
    assert substrings.tolist() == [["a", "b", "c"], ["d", "", ""]]
    assert counts.tolist() == [3, 1]
    substrings, counts = run_ours("StringSplit", [strings("x", shape=())], {}, opset=20, n_outputs=2)
    assert substrings.shape == (1,) and counts.shape == () and int(counts) == 1


def test_string_split_empty_input_shape():
    substrings, counts = run_ours("StringSplit", [strings().reshape(0, 3)], {}, opset=20, n_outputs=2)
    assert substrings.shape == (0, 3, 0) and counts.shape == (0, 3)


# --------------------------------------------------------------------------------- StringConcat

@pytest.mark.parametrize("x, y", [
    (strings("a", "bc"), strings("x", "yz")),
    (strings("a", "b", "c", "d", shape=(2, 2)), strings("!", shape=(1,))),
    (strings("ü", shape=()), strings("", "ß")),
])
def test_string_concat_matches_reference(x, y):
    (ours,) = run_ours("StringConcat", [x, y], opset=20)
    (ref,) = run_reference("StringConcat", [x, y], opset=20)
    same_strings(ours, ref)


def test_string_concat_scalar_result_is_array():
    (y,) = run_ours("StringConcat", [strings("a", shape=()), strings("b", shape=())], opset=20)
    assert isinstance(y, np.ndarray) and y.dtype == object and y.shape == () and y.item() == "ab"


def test_string_concat_errors():
    with pytest.raises(KernelError, match="broadcast"):
        run_ours("StringConcat", [strings("a", "b"), strings("a", "b", "c")], opset=20)
    with pytest.raises(KernelError, match="string tensor"):
        run_ours("StringConcat", [strings("a"), np.array([1])], opset=20)


# ------------------------------------------------------------------------------- RegexFullMatch

@pytest.mark.parametrize("pattern, values", [
    (r"www\.[\w.-]+\.\bcom\b", ["www.google.com", "www.facebook.com", "www.bbc.co.uk"]),
    (r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)", ["account@gmail.com", "x@yahoo.org", "a@gmail.com "]),
    (r"[a-c]+\d?", ["abc1", "abcd", "", "c9"]),
])
def test_regex_full_match_matches_reference(pattern, values):
    x = strings(*values)
    (ours,) = run_ours("RegexFullMatch", [x], dict(pattern=pattern), opset=20)
    (ref,) = run_reference("RegexFullMatch", [x], dict(pattern=pattern), opset=20)
    assert ours.dtype == np.bool_
    np.testing.assert_array_equal(ours, ref)


def test_regex_full_match_shapes_and_re2_end_of_text():
    (y,) = run_ours("RegexFullMatch", [strings().reshape(2, 0)], dict(pattern="a"), opset=20)
    assert y.shape == (2, 0) and y.dtype == np.bool_
    # RE2's \z (end of text) is Python's \Z
    (y,) = run_ours("RegexFullMatch", [strings("ab", "abc", shape=(1, 2))], dict(pattern=r"ab\z"), opset=20)
    assert y.tolist() == [[True, False]]
    (y,) = run_ours("RegexFullMatch", [strings(r"a\z")], dict(pattern=r"a\\z"), opset=20)
    assert y.tolist() == [True]  # an escaped backslash followed by z is not \z


def test_regex_full_match_errors():
    with pytest.raises(KernelError, match="invalid pattern"):
        run_ours("RegexFullMatch", [strings("a")], dict(pattern="(unclosed"), opset=20)
    with pytest.raises(KernelError, match="pattern"):
        run_ours("RegexFullMatch", [strings("a")], {}, opset=20)
