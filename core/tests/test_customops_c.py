"""C custom-op libraries: the example library's ops, the loader's checks (ABI version, symbols), clear errors."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from ort_core.customops import ABI_VERSION, example_library_source, get_include, load_custom_ops_library

from .conftest import make_model
from .customops_build import build_library

T = TensorProto
EX = "ortc.example"


@pytest.fixture(scope="module")
def example_lib(tmp_path_factory):
    return build_library(example_library_source(), tmp_path_factory.mktemp("customops_c"), "example_ops")


def compile_source(tmp_path, name, source):
    path = tmp_path / f"{name}.c"
    path.write_text(source)
    return build_library(path, tmp_path, name)


def session(example_lib, nodes, inputs, outputs):
    so = ort.SessionOptions()
    so.register_custom_ops_library(example_lib)
    return ort.InferenceSession(make_model(nodes, inputs, outputs, extra_opsets=[helper.make_opsetid(EX, 1)]), so)


def vi(name, elem=T.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


# ------------------------------------------------------------------ the example ops
def test_example_library_declares_its_ops(example_lib):
    ops = {op.op_type: op for op in load_custom_ops_library(example_lib)}
    assert set(ops) == {"ScaledSum", "RowSelect"}
    ss, rs = ops["ScaledSum"], ops["RowSelect"]
    assert ss.domain == EX and (ss.since, ss.until) == (1, None)
    assert [(s.name, s.var, s.variadic) for s in ss.input_specs] == [("X", "T", True)]
    assert [(a.name, a.kind, a.default) for a in ss.attr_specs] == [("alpha", "float", 1.0), ("beta", "float", 0.0)]
    assert [(a.name, a.kind, a.required) for a in rs.attr_specs] == [("rows", "ints", True), ("mode", "string", False)]
    assert rs.input_specs[1].optional
    assert load_custom_ops_library(example_lib) == list(ops.values())  # loaded once, then reused


def test_scaled_sum_on_doubles_with_attribute_defaults_and_overrides(example_lib):
    nodes = [helper.make_node("ScaledSum", ["a", "b"], ["y", "s"], domain=EX),
             helper.make_node("ScaledSum", ["a"], ["y1", "s1"], domain=EX, alpha=-2.0, beta=0.25)]
    sess = session(example_lib, nodes, [vi("a", T.DOUBLE, [2, 2]), vi("b", T.DOUBLE, [2, 2])],
                   [vi(n, 0) for n in ("y", "s", "y1", "s1")])
    # static types before any run: T bound by the double inputs; SumSq declared double
    assert [o.type for o in sess.get_outputs()] == ["tensor(double)"] * 4
    a, b = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[0.5, -1.0], [2.0, 0.0]])
    y, s, y1, s1 = sess.run(None, {"a": a, "b": b})
    np.testing.assert_array_equal(y, a + b)
    assert s.shape == () and s == ((a + b) ** 2).sum()
    np.testing.assert_array_equal(y1, -2.0 * a + 0.25)
    assert s1 == ((-2.0 * a + 0.25) ** 2).sum()


def test_row_select_ints_and_string_attributes_and_optional_input(example_lib):
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    nodes = [helper.make_node("RowSelect", ["x"], ["a"], domain=EX, rows=[4, 0, -2]),
             helper.make_node("RowSelect", ["x", "k"], ["b"], domain=EX, rows=[1], mode="negate")]
    sess = session(example_lib, nodes, [vi("x", T.FLOAT, [5, 3]), vi("k", T.FLOAT, [])],
                   [vi("a", T.FLOAT, [3, 3]), vi("b", T.FLOAT, [1, 3])])
    a, b = sess.run(None, {"x": x, "k": np.array(0.5, np.float32)})
    np.testing.assert_array_equal(a, x[[4, 0, -2]])
    np.testing.assert_array_equal(b, -0.5 * x[[1]])


def test_c_op_declaration_checks_apply(example_lib):
    cases = [
        ([helper.make_node("ScaledSum", ["i"], ["y", "s"], domain=EX, name="n")], [vi("i", T.INT64, [2])],
         ort.InvalidGraph, r"node 'n' \(ortc.example::ScaledSum\).*tensor\(int64\); 'X' accepts T: \{double, float\}"),
        ([helper.make_node("RowSelect", ["x"], ["y"], domain=EX, name="n")], [vi("x", T.FLOAT, [2, 2])],
         ort.InvalidGraph, r"node 'n' \(ortc.example::RowSelect\).*required attribute 'rows'"),
        ([helper.make_node("RowSelect", ["x"], ["y"], domain=EX, name="n", rows=[0.5])], [vi("x", T.FLOAT, [2, 2])],
         ort.OrtError, r"node 'n'.*attribute 'rows' of custom op ortc.example::RowSelect: expected a list of ints"),
    ]
    for nodes, inputs, error, pattern in cases:
        outputs = [vi(o, 0) for o in nodes[0].output]
        with pytest.raises(error, match=pattern):
            session(example_lib, nodes, inputs, outputs)


def test_library_status_becomes_an_error_naming_the_node(example_lib):
    sess = session(example_lib, [helper.make_node("ScaledSum", ["a", "b"], ["y", "s"], domain=EX, name="summer")],
                   [vi("a", T.FLOAT, ["N"]), vi("b", T.FLOAT, ["M"])], [vi("y", 0), vi("s", 0)])
    with pytest.raises(ort.InvalidArgument, match=r"node 'summer' \(ortc.example::ScaledSum\).*status 2 "
                                                  r"\(INVALID_ARGUMENT\): ScaledSum: input 1 has a different shape"):
        sess.run(None, {"a": np.zeros(2, np.float32), "b": np.zeros(3, np.float32)})
    (y, s) = sess.run(None, {"a": np.ones(2, np.float32), "b": np.ones(2, np.float32)})  # still usable
    np.testing.assert_array_equal(y, [2, 2])


def test_non_contiguous_and_read_only_inputs(example_lib):
    sess = session(example_lib, [helper.make_node("RowSelect", ["x"], ["y"], domain=EX, rows=[1, 0])],
                   [vi("x", T.FLOAT, [2, 3])], [vi("y", T.FLOAT, [2, 3])])
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = base[:2, ::-1][:, :3]
    x.flags.writeable = False
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, x[[1, 0]])


# ------------------------------------------------------------------- loader errors
def test_missing_library_file():
    so = ort.SessionOptions()
    with pytest.raises(ort.NoSuchFile, match=r"custom-op library '/nonexistent/libnope.so' does not exist"):
        so.register_custom_ops_library("/nonexistent/libnope.so")


def test_file_that_is_not_a_library(tmp_path):
    bogus = tmp_path / "libbogus.so"
    bogus.write_text("not an ELF file")
    with pytest.raises(ort.Fail, match=rf"cannot load custom-op library '{bogus}'"):
        ort.SessionOptions().register_custom_ops_library(str(bogus))


WRONG_VERSION = """
#include "ort_core_custom_op.h"
ORTC_EXPORT int32_t ortc_abi_version(void) { return 99; }
ORTC_EXPORT const ortc_op *ortc_get_ops(int32_t *count) { *count = 0; return 0; }
"""

NO_OPS_SYMBOL = """
#include "ort_core_custom_op.h"
ORTC_EXPORT int32_t ortc_abi_version(void) { return ORTC_ABI_VERSION; }
"""

ORT_STYLE = """
#include "ort_core_custom_op.h"
ORTC_EXPORT int RegisterCustomOps(void *options, void *api) { return 0; }
"""


def test_abi_version_mismatch(tmp_path):
    lib = compile_source(tmp_path, "wrong_version", WRONG_VERSION)
    with pytest.raises(ort.Fail) as err:
        ort.SessionOptions().register_custom_ops_library(lib)
    msg = str(err.value)
    assert f"'{lib}'" in msg and "ABI version 99" in msg and f"implements version {ABI_VERSION}" in msg
    assert "ort_core_custom_op.h" in msg


def test_missing_symbols(tmp_path):
    lib = compile_source(tmp_path, "no_ops", NO_OPS_SYMBOL)
    with pytest.raises(ort.Fail, match=rf"'{lib}' reports ABI version 1 but does not export 'ortc_get_ops'"):
        load_custom_ops_library(lib)
    ort_lib = compile_source(tmp_path, "ort_style", ORT_STYLE)
    with pytest.raises(ort.Fail, match=rf"'{ort_lib}' does not export 'ortc_abi_version'.*exports RegisterCustomOps: "
                                       "an onnxruntime custom-op library"):
        load_custom_ops_library(ort_lib)


BAD_TABLE = """
#include "ort_core_custom_op.h"
static const ortc_arg ins[] = {{"X", "%s", 0}};
static const ortc_arg outs[] = {{"Y", "float", 0}};
static int32_t fn(const ortc_tensor *i, int32_t ni, const ortc_attr_value *a, int32_t na, ortc_tensor *o, int32_t no,
                  char *m, size_t ms) { return ORTC_FAIL; }
static const ortc_op ops[] = {{"bad.ops", "Broken", 1, 0, 1, ins, 1, outs, 0, 0, 0, 0, fn, %s}};
ORTC_EXPORT int32_t ortc_abi_version(void) { return ORTC_ABI_VERSION; }
ORTC_EXPORT const ortc_op *ortc_get_ops(int32_t *count) { *count = 1; return ops; }
"""


@pytest.mark.parametrize("name, in_type, compute, error, pattern", [
    ("null_compute", "float", "0", ort.InvalidArgument, r"custom op bad.ops::Broken has no compute function"),
    ("string_input", "string", "fn", ort.InvalidArgument, r"'X' allows string tensors, which cannot cross the C ABI"),
    ("unknown_type", "floaty", "fn", ort.InvalidArgument, r"type 'floaty' is neither an ONNX element type"),
])
def test_malformed_op_table_names_library_and_op(tmp_path, name, in_type, compute, error, pattern):
    lib = compile_source(tmp_path, name, BAD_TABLE % (in_type, compute))
    with pytest.raises(error, match=rf"custom-op library '{lib}', op table entry 0: .*{pattern}"):
        load_custom_ops_library(lib)


def test_failing_c_kernel_reports_status(tmp_path):
    lib = compile_source(tmp_path, "always_fails", (BAD_TABLE % ("float", "fn")).replace("return ORTC_FAIL;", """
        if (o[0].data == 0) { o[0].elem_type = ORTC_FLOAT; o[0].rank = 0; return ORTC_OK; }
        snprintf(m, ms, "device on fire"); return ORTC_FAIL;""").replace(
        '#include "ort_core_custom_op.h"', '#include <stdio.h>\n#include "ort_core_custom_op.h"'))
    so = ort.SessionOptions()
    so.register_custom_ops_library(lib)
    model = make_model([helper.make_node("Broken", ["x"], ["y"], domain="bad.ops", name="b")], [vi("x", T.FLOAT, [])],
                       [vi("y", T.FLOAT, [])], extra_opsets=[helper.make_opsetid("bad.ops", 1)])
    sess = ort.InferenceSession(model, so)
    with pytest.raises(ort.KernelError, match=r"node 'b' \(bad.ops::Broken\).*compute.*status 1 \(FAIL\): device on "
                                              "fire"):
        sess.run(None, {"x": np.array(1, np.float32)})


def test_header_ships_with_the_package():
    header = os.path.join(get_include(), "ort_core_custom_op.h")
    text = open(header).read()
    assert f"#define ORTC_ABI_VERSION {ABI_VERSION}" in text
    assert "ORTC_CDEF_BEGIN" in text and "ORTC_CDEF_END" in text
    assert os.path.exists(example_library_source())


def test_missing_compiler_skips_with_a_clear_reason(monkeypatch):
    from . import customops_build

    monkeypatch.setattr(customops_build.shutil, "which", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match="no C compiler found"):
        customops_build.compiler()
