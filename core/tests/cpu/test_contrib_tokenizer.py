"""com.microsoft::Tokenizer against onnxruntime itself (strings compared exactly): the three modes, mark,
pad_value, mincharnum, RE2 semantics (leftmost-longest, ASCII classes, $, flags), shapes, the attribute
values onnxruntime refuses, bad inputs, a whole model through a session, and an skl2onnx text pipeline
when skl2onnx and scikit-learn are installed."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import AttributeProto, TensorProto, helper

import ort_core
from ort_core.errors import KernelError
from ort_core.limits import RunContext, run_context
from ort_core.providers.cpu.ops.contrib_tokenizer import START_MARK, translate

from .kernel_harness import run_onnxruntime, run_ours

MS = "com.microsoft"
BASE = dict(mark=0, pad_value="#", mincharnum=1)
TEXTS = ["Hello World", "I love computer science !", "", "a.b,c?d (e) [f]", "ab\ncd\n", "café naïve Ωμέγα 42",
         "x", "tab\tand\vvt", "foobar foo", "aaa bb"]


def strings(values, shape=None) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = list(values)
    return arr if shape is None else arr.reshape(shape)


def ours(x, **attrs):
    (y,) = run_ours("Tokenizer", [x], attrs, opset=1, domain=MS)
    return y


def theirs(x, **attrs):
    (y,) = run_onnxruntime("Tokenizer", [x], attrs, domain=MS)
    return y


def check(x, **attrs) -> np.ndarray:
    """Our output equals onnxruntime's: dtype object, same shape, equal strings."""
    y, ref = ours(x, **attrs), theirs(x, **attrs)
    assert isinstance(y, np.ndarray) and y.dtype == object
    assert y.shape == ref.shape, (y.shape, ref.shape)
    assert y.tolist() == ref.tolist()
    return y


# --------------------------------------------------------------------------- against onnxruntime

def test_doc_example_values():
    x = strings(["Hello World", "I love computer science !"])
    y = check(x, separators=[" "], **BASE)
    assert y.tolist() == [["Hello", "World", "#", "#", "#"], ["I", "love", "computer", "science", "!"]]
    y = check(x, separators=[" "], mark=1, pad_value="<pad>", mincharnum=1)
    assert y.shape == (2, 7)  # markers around the tokens, padding after the end marker
    assert y[0].tolist() == [START_MARK, "Hello", "World", "\x03", "<pad>", "<pad>", "<pad>"]


@pytest.mark.parametrize("mark", [0, 1])
@pytest.mark.parametrize("mode", [dict(separators=[""]), dict(tokenexp=".")])
def test_character_mode(mode, mark):
    y = check(strings(["abc", "", "é\nz"]), mark=mark, pad_value="_", mincharnum=1, **mode)
    assert y[0, mark:mark + 3].tolist() == ["a", "b", "c"]


@pytest.mark.parametrize("mark", [0, 1])
@pytest.mark.parametrize("mode", [dict(separators=[" "]), dict(tokenexp="[a-z]+"), dict(separators=[""])])
def test_all_strings_empty_gives_no_tokens(mode, mark):
    y = check(strings(["", ""], shape=(1, 2)), mark=mark, pad_value="#", mincharnum=1, **mode)
    assert y.shape == (1, 2, 0)  # no markers either


@pytest.mark.parametrize("shape", [(0,), (2, 0), (0, 3)])
def test_empty_input(shape):
    y = check(np.empty(shape, dtype=object), separators=[" "], mark=1, pad_value="#", mincharnum=1)
    assert y.shape == {(0,): (0,), (2, 0): (2, 0), (0, 3): (0, 0)}[shape]


@pytest.mark.parametrize("mincharnum", [1, 2, 3, 5])
@pytest.mark.parametrize("mode", [dict(separators=[" "]), dict(tokenexp="[a-zA-Z]+"),
                                  dict(separators=[" ", "[.,?()]"])])
def test_mincharnum(mode, mincharnum):
    check(strings(TEXTS), mark=1, pad_value="#", mincharnum=mincharnum, **mode)


def test_mincharnum_restarts_one_character_after_a_short_match():
    y = check(strings(["ab cdef g"]), tokenexp="[a-z]+", mark=0, pad_value="#", mincharnum=3)
    assert y.tolist() == [["cdef"]]
    y = check(strings(["abcd"]), tokenexp="ab|bcd", mark=0, pad_value="#", mincharnum=3)
    assert y.tolist() == [["bcd"]]  # found from the "b" inside the short match "ab"


@pytest.mark.parametrize("separators", [
    ["."], ["[.]"], ["\\."], ["\\?"], ["|"], ["", " "], ["a|ab"], ["\\b"], ["$"], ["^"], ["x*"], ["\\s+"],
    [" ", "[.]", "\\?", ",", ";", ":", "\\!"], [" ", "o"], ["(?i)O"], ["[[:punct:]]"], ["\\W"], ["\\pL"],
])
def test_separators_are_re2_expressions(separators):
    check(strings(TEXTS, shape=(2, 5)), separators=separators, mark=1, pad_value="#", mincharnum=1)


def test_separator_special_characters_values():
    x = strings(["a.b.c", "x|y"])
    assert check(x, separators=["."], **BASE).shape == (2, 0)  # "." is any character
    assert check(x, separators=["[.]"], **BASE).tolist() == [["a", "b", "c"], ["x|y", "#", "#"]]
    assert check(x, separators=["|"], **BASE).shape == (2, 0)  # the empty expression eats everything


@pytest.mark.parametrize("tokenexp", [
    "[a-zA-Z0-9_]+", "\\b\\w\\w+\\b", "\\w+", "\\S+", "a|ab", "foo|foobar", "\\b(?:foo|foobar)\\b", "(a*)(ab)?b?",
    "a+?", "(?U)a+", "[a-z]+$", "(?m)[a-z]+$", "[a-z]+\\z", "(?i)HELLO|WO", "l(?i)O|W", "[[:alpha:]]+",
    "[^\\W\\d]+", "\\pL+", "\\p{Lu}\\p{Ll}*", "\\Qa.b\\E", "\\x{41}|\\101|e", "a{,2}", "x*", "\\w+|[^\\w\\s]+",
    "(?s).", "^\\w+", "[\\d\\s]+", "(?:ab|a|aaa)+", "a+(?i)?b", "(?i)b+(?-i)*", "\\Qab\\E+", "\\Qab\\E+(?i)?",
    "x(?i)b|c",
])
def test_tokenexp_matches_like_re2(tokenexp):
    texts = TEXTS + ["a{,2}", "abab aab", "HELLO hello World", "a.b A", "aaB abbb Bb C"]
    check(strings(texts), tokenexp=tokenexp, mark=0, pad_value="#", mincharnum=1)


@pytest.mark.parametrize("tokenexp", ["a|ab\\b", "a|ab\\B", "(?m)a|ab$", "a|ab$", "a|ab\\z", "(?:a|ab)\\b"])
def test_longest_match_looks_past_its_end(tokenexp):
    # the longer candidate "ab" holds or not depending on the character after it
    check(strings(["abc", "ab c", "ab\nc", "ab_", "ab", "ab.", "xab", "ab\n"]), tokenexp=tokenexp, **BASE)


def test_re2_semantics_values():
    x = strings(["xaby", "ab\n", "café"])
    assert check(x, tokenexp="a|ab", **BASE)[0, 0] == "ab"  # leftmost-longest, not leftmost-first
    assert check(x, tokenexp="[a-z]+$", **BASE)[1, 0] == "#"  # $ is the end of the text only
    assert check(x, tokenexp="\\w+", **BASE)[2, 0] == "caf"  # \w is ASCII
    y = check(strings(["abc", "ab c"]), tokenexp="a|ab\\b", **BASE)
    assert y.tolist() == [["a"], ["ab"]]  # "ab" only where a word boundary follows it


def test_two_dimensional_input_keeps_both_axes():
    y = check(strings(TEXTS[:6], shape=(3, 2)), separators=[" "], mark=1, pad_value="#", mincharnum=1)
    assert y.shape[:2] == (3, 2)


def test_separators_win_over_tokenexp():
    y = check(strings(["ab"]), separators=["b"], tokenexp="b", **BASE)
    assert y.tolist() == [["a"]]


def test_through_a_session():
    """A saved model with a Tokenizer runs through ort_core.InferenceSession like through onnxruntime."""
    node = helper.make_node("Tokenizer", ["x"], ["y"], domain=MS, mark=1, pad_value="#", mincharnum=2,
                            separators=[" ", "[.]"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.STRING, [None, None])],
                              [helper.make_tensor_value_info("y", TensorProto.STRING, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    x = strings(TEXTS[:4], shape=(2, 2))
    (y,) = ort_core.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    assert y.tolist() == theirs(x, mark=1, pad_value="#", mincharnum=2, separators=[" ", "[.]"]).tolist()


# --------------------------------------------------------------------------- refused like onnxruntime

def _ort_refuses(attributes: list[AttributeProto]) -> None:
    ort = pytest.importorskip("onnxruntime")
    node = helper.make_node("Tokenizer", ["x"], ["y"], domain=MS)
    node.attribute.extend(attributes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
                              [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own exception types vary (Fail, InvalidGraph)
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("attrs", [
    dict(mark=0, pad_value="#", separators=[" "]),  # mincharnum missing
    dict(mark=0, mincharnum=1, separators=[" "]),  # pad_value missing
    dict(BASE, mincharnum=0, separators=[" "]),
    dict(BASE, mincharnum=2, separators=[""]),  # character mode takes mincharnum 1 only
    dict(BASE, mincharnum=2, tokenexp="."),
    dict(BASE),  # neither separators nor tokenexp
    dict(BASE, tokenexp=""),
    dict(BASE, tokenexp="a", tokenexpsplit=1),  # not in onnxruntime's schema
    dict(BASE, mark=1.5, tokenexp="a"),
    dict(BASE, separators=["+"]),
    dict(BASE, tokenexp="(?=a)a"),
    dict(BASE, tokenexp="(a)\\1"),
    dict(BASE, tokenexp="a\\Z"),
    dict(BASE, tokenexp="a{1001}"),
    dict(BASE, tokenexp="a**"),
    dict(BASE, tokenexp="a*+"),
    dict(BASE, tokenexp="(?x)a"),
    dict(BASE, separators=[" ", "(a"]),
])
def test_attributes_onnxruntime_refuses_are_refused(attrs):
    _ort_refuses([helper.make_attribute(k, v) for k, v in attrs.items()])
    with pytest.raises(KernelError, match="test_Tokenizer"):
        ours(strings(["a b", "c"]), **attrs)


def test_empty_separator_list_is_refused():
    empty = helper.make_attribute("separators", [], attr_type=AttributeProto.STRINGS)
    _ort_refuses([empty] + [helper.make_attribute(k, v) for k, v in BASE.items()])
    with pytest.raises(KernelError, match="test_Tokenizer.*separators.*empty"):
        ours(strings(["a b"]), separators=[], **BASE)


def test_unicode_script_classes_are_refused_with_a_clear_error():
    # RE2 knows scripts such as Greek; Python's re and unicodedata do not: an error, not a wrong answer
    with pytest.raises(KernelError, match="Greek"):
        ours(strings(["Ωμέγα"]), tokenexp="\\p{Greek}+", **BASE)


@pytest.mark.parametrize("x", [
    np.array([1.0, 2.0], dtype=np.float32),
    np.array([1, 2], dtype=np.int64),
    strings(["a b"] * 8, shape=(2, 2, 2)),
    np.array("a b", dtype=object),
    strings(["a", 3]),
])
def test_bad_inputs_raise_kernel_error(x):
    with pytest.raises(KernelError, match="test_Tokenizer"):
        ours(x, separators=[" "], **BASE)


def test_bytes_and_fixed_width_strings_are_read_as_text():
    expected = [["a", "é"], ["c", "#"]]
    assert ours(np.array(["a é", "c"]), separators=[" "], **BASE).tolist() == expected
    assert ours(np.array(["a é".encode(), b"c"]), separators=[" "], **BASE).tolist() == expected
    with pytest.raises(KernelError, match="UTF-8"):
        ours(strings([b"\xff"]), separators=[" "], **BASE)


def test_output_size_is_checked_before_allocation():
    x = strings(["a b c d e f g h i j"])  # 10 tokens: 80 bytes of object pointers
    with run_context(RunContext(max_tensor_bytes=64)), pytest.raises(KernelError, match="test_Tokenizer"):
        ours(x, separators=[" "], **BASE)
    with run_context(RunContext(max_tensor_bytes=80)):
        assert ours(x, separators=[" "], **BASE).shape == (1, 10)


def test_output_does_not_alias_and_is_repeatable():
    x = strings(["a b", "c"])
    y1, y2 = ours(x, separators=[" "], **BASE), ours(x, separators=[" "], **BASE)
    assert y1.tolist() == y2.tolist() and not np.shares_memory(y1, x)
    assert x.tolist() == ["a b", "c"]


def test_translation_marks_only_what_needs_the_longest_search():
    # ambiguous: re's first match may be shorter than RE2's; end_sensitive: looks past the match's end
    assert translate("[a-z]+")[1:3] == (False, False)
    assert translate("\\b\\w\\w+\\b")[1:3] == (False, True)
    assert translate("a|ab")[1:3] == (True, False)
    assert translate("(?:ab)+$")[1:3] == (True, True)


# --------------------------------------------------------------------------- a real skl2onnx pipeline

@pytest.mark.parametrize("vectorizer_name", ["CountVectorizer", "TfidfVectorizer"])
@pytest.mark.parametrize("options", [
    {"separators": [" ", "[.]", "\\?", ",", ";", ":", "!"]},
    {"tokenexp": ""},  # scikit-learn's default pattern, which the converter rewrites to [a-zA-Z0-9_]+
])
def test_skl2onnx_text_vectorizer(vectorizer_name, options):
    sklearn_text = pytest.importorskip("sklearn.feature_extraction.text")
    skl2onnx = pytest.importorskip("skl2onnx")
    ort = pytest.importorskip("onnxruntime")
    from skl2onnx.common.data_types import StringTensorType

    corpus = np.array(["This is the first document.", "This document is the second document.",
                       "And this is the third one?", "Is this the first document!", ""], dtype=object)
    # lowercase=False: no StringNormalizer, which in onnxruntime needs the en_US.UTF-8 locale installed
    vectorizer = getattr(sklearn_text, vectorizer_name)(ngram_range=(1, 2), lowercase=False).fit(corpus)
    model = skl2onnx.convert_sklearn(vectorizer, "text", initial_types=[("input", StringTensorType([None, 1]))],
                                     options={id(vectorizer): options}, target_opset=17)
    assert any(n.op_type == "Tokenizer" and n.domain == MS for n in model.graph.node)
    data = model.SerializeToString()
    feed = {"input": corpus.reshape(-1, 1)}
    (expected,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)
    (got,) = ort_core.InferenceSession(data).run(None, feed)
    assert got.dtype == expected.dtype and got.shape == expected.shape == (5, len(vectorizer.vocabulary_))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    assert np.count_nonzero(expected[:4], axis=1).min() > 3  # the pipeline did find words and bigrams
