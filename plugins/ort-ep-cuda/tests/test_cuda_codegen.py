"""The elementwise generator without a GPU: every kernel it can emit compiles with NVRTC to a CUBIN for sm_90 and
sm_80, the compiled-kernel cache, launch configurations, the launch-parameter layout and broadcast strides (run
through a numpy model of the kernel's index arithmetic), and the numpy references against the CPU provider."""

from __future__ import annotations

import itertools
import struct

import numpy as np
import pytest
from cuda_helpers import F16, F32, make_model, whole_subgraph
from ort_ep_cuda import codegen, nvrtc
from ort_ep_cuda.kernels import Elementwise, plan_subgraph

import ort_core as ort

UNARY = [op for op, o in codegen.OPS.items() if o.arity == 1]
BINARY = [op for op, o in codegen.OPS.items() if o.arity == 2]
TERNARY = [op for op, o in codegen.OPS.items() if o.arity == 3]


def _single(op: str, dtype: str, rank: int) -> codegen.Program:
    arity = codegen.OPS[op].arity
    return codegen.Program(dtype, rank, arity, ((op, tuple(("in", k) for k in range(arity))),), (0,))


GELU_CHAIN = codegen.Program("float32", 3, 3, (
    ("Div", (("in", 0), ("in", 1))), ("Erf", (("t", 0),)), ("Add", (("t", 1), ("in", 2))),
    ("Mul", (("in", 0), ("t", 2))), ("Mul", (("t", 3), ("in", 1)))), (4,))

PROGRAMS = [_single(op, dtype, rank) for op, dtype, rank in itertools.product(
    codegen.OPS, codegen.DTYPES, (1, 4))] + [GELU_CHAIN, codegen.Program(
        "float16", 2, 2, (("Add", (("in", 0), ("in", 1))), ("Sigmoid", (("t", 0),)), ("Mul", (("t", 1), ("in", 0)))),
        (0, 2))] + [codegen.cast(a, b, 3) for a, b in (("float32", "float16"), ("float16", "float32"))]


def _param_bytes(cubin: bytes, kernel: str) -> int:
    """The size of ``kernel``'s parameters as the device compiler laid them out: EIATTR_CBANK_PARAM_SIZE (0x19)
    in the CUBIN's ELF section .nv.info.<kernel>. Records are a format byte, an attribute byte, then a 2-byte
    value (formats 1-3: none, byte, half; padded to 4 bytes) or a 2-byte length and that many bytes (format 4)."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names = sections[shstrndx][4]
    for name, _, _, _, offset, size in sections:
        if cubin[names + name:cubin.index(b"\0", names + name)] != f".nv.info.{kernel}".encode():
            continue
        body, i = cubin[offset:offset + size], 0
        while i + 2 <= len(body):
            fmt, attr = body[i], body[i + 1]
            i += 2
            width = 2 + struct.unpack_from("<H", body, i)[0] if fmt == 4 else 2
            if fmt == 3 and attr == 0x19:
                return struct.unpack_from("<H", body, i)[0]
            i += width
    raise AssertionError(f"no parameter size for {kernel} in the CUBIN")


@pytest.mark.parametrize("arch", [90, 80])
@pytest.mark.parametrize("program", PROGRAMS,
                         ids=lambda p: f"{p.steps[0][0]}-{p.dtype}-{p.result_dtype}-r{p.rank}-{len(p.steps)}")
def test_every_emitted_kernel_compiles_to_a_cubin(program, arch):
    cubin = nvrtc.compile_cubin(codegen.source(program), program.name, arch)
    assert cubin[:4] == b"\x7fELF"
    assert program.name.encode() in cubin  # the extern "C" kernel is in its symbol table
    # the device's parameter struct has exactly the bytes pack_params lays out
    words = codegen.pack_params(program, [0] * (program.n_inputs + len(program.outputs)), [1] * program.rank,
                                [[0] * program.rank] * program.n_inputs)
    assert _param_bytes(cubin, program.name) == words.nbytes


def test_every_op_is_covered_by_the_compile_test():
    assert {p.steps[0][0] for p in PROGRAMS} == set(codegen.OPS)
    assert set(UNARY) | set(BINARY) | set(TERNARY) == set(codegen.OPS)


def test_a_source_that_does_not_compile_reports_nvrtcs_log():
    with pytest.raises(nvrtc.CudaError, match=r"nvrtcCompileProgram\(broken, sm_90\) failed: NVRTC_ERROR_COMPILATION"
                       r"[\s\S]*undefined_thing"):
        nvrtc.compile_cubin('extern "C" __global__ void broken() { undefined_thing(); }', "broken", 90)


def test_casts_store_the_other_type_and_name_their_kernels_apart():
    down, up = codegen.cast("float32", "float16", 2), codegen.cast("float16", "float32", 2)
    assert codegen.cast("float32", "float32", 2) == codegen.identity("float32", 2)
    assert len({down.name, up.name, codegen.identity("float32", 2).name, codegen.identity("float16", 2).name}) == 4
    assert "((unsigned short*)p.ptr[1])[i] = ort_f2h(t0);" in down.cuda()
    assert "ort_h2f(((const unsigned short*)p.ptr[0])[o0])" in up.cuda() and "((float*)p.ptr[1])[i] = t0;" in up.cuda()
    x = np.array([[1.0, 65504.0, 1e-8], [np.inf, -2.5, 70000.0]], np.float32)
    half = codegen.reference(down, [x])[0]
    with np.errstate(over="ignore"):
        assert half.dtype == np.float16 and half.tolist() == x.astype(np.float16).tolist()  # 70000 -> inf
    assert codegen.reference(up, [half])[0].dtype == np.float32
    with pytest.raises(ValueError, match="dtype 'int8' is not one of"):
        codegen.Program("float32", 1, 1, (("Identity", (("in", 0),)),), (0,), "int8")


def test_programs_are_checked_when_made():
    with pytest.raises(ValueError, match="step 0: Add with 1 operand"):
        codegen.Program("float32", 1, 1, (("Add", (("in", 0),)),), (0,))
    with pytest.raises(ValueError, match="not an input or an earlier step"):
        codegen.Program("float32", 1, 1, (("Relu", (("t", 0),)),), (0,))
    with pytest.raises(ValueError, match="dtype 'float64'"):
        codegen.Program("float64", 1, 1, (("Relu", (("in", 0),)),), (0,))


def test_the_cache_compiles_once_per_source_and_arch(tmp_path):
    cache = nvrtc.KernelCache(str(tmp_path))
    src = codegen.source(GELU_CHAIN)
    before = nvrtc.compiles
    first = cache.cubin(src, GELU_CHAIN.name, 90)
    again = nvrtc.KernelCache(str(tmp_path)).cubin(src, GELU_CHAIN.name, 90)  # as a second session would
    assert again == first and nvrtc.compiles == before + 1
    other = cache.cubin(src, GELU_CHAIN.name, 80)
    assert other != first and nvrtc.compiles == before + 2
    assert len(list(tmp_path.glob("*.sm_90.cubin"))) == 1 and len(list(tmp_path.glob("*.sm_80.cubin"))) == 1


@pytest.mark.parametrize("n, sms, expected", [
    (0, 132, None), (1, 132, (1, 32)), (33, 132, (1, 64)), (256, 132, (1, 256)), (257, 132, (2, 256)),
    (10**6, 132, (132 * 8, 256)), (10**6, 1, (8, 256)), (3000, 132, (12, 256))])
def test_launch_config(n, sms, expected):
    cfg = codegen.launch_config(n, sms)
    assert (None if cfg is None else (cfg.grid, cfg.block)) == expected
    if cfg is not None:  # the grid-stride loop reaches every element and the block is whole warps
        assert cfg.block % 32 == 0 and cfg.grid * cfg.block * -(-n // (cfg.grid * cfg.block)) >= n


def test_launch_config_respects_the_device_and_refuses_nonsense():
    assert codegen.launch_config(10**9, 1000, max_threads_per_block=128).block == 128
    assert codegen.launch_config(2**62, 10**9, blocks_per_sm=10**3).grid == codegen.MAX_GRID_X
    with pytest.raises(ValueError):
        codegen.launch_config(-1, 1)
    with pytest.raises(ValueError):
        codegen.launch_config(1, 0)


@pytest.mark.parametrize("shape, out", [((3,), (2, 3)), ((2, 1), (2, 3)), ((1,), (4,)), ((), (2, 2)),
                                        ((4, 1, 3), (2, 4, 5, 3)), ((2, 3), (2, 3))])
def test_broadcast_strides_agree_with_numpy(shape, out):
    x = np.zeros(shape, np.float32)
    expected = [s // 4 for s in np.broadcast_to(x, out).strides]
    assert codegen.broadcast_strides(shape, None, 4, out) == expected


def test_broadcast_strides_of_a_strided_input_and_errors():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]  # strides (24, 8) bytes
    assert codegen.broadcast_strides(x.shape, x.strides, 4, (4, 3)) == [6, 2]
    with pytest.raises(ValueError, match="does not broadcast"):
        codegen.broadcast_strides((3,), None, 4, (2, 4))
    with pytest.raises(ValueError, match="not multiples"):
        codegen.broadcast_strides((3,), (6,), 4, (3,))


def _run_like_the_kernel(program: codegen.Program, words: np.ndarray, memory: dict[int, np.ndarray]) -> None:
    """The generated kernel's loop, in numpy: decode the parameter struct exactly as the CUDA source reads it."""
    n_ptr = program.n_inputs + len(program.outputs)
    ptrs = [int(np.int64(w).astype(np.uint64)) for w in words[:n_ptr]]
    n, shape = int(words[n_ptr]), [int(d) for d in words[n_ptr + 1:n_ptr + 1 + program.rank]]
    st = words[n_ptr + 1 + program.rank:].reshape(max(program.n_inputs, 1), program.rank)
    for i in range(n):
        rem, offs = i, [0] * program.n_inputs
        for d in reversed(range(program.rank)):
            c = rem % shape[d]
            rem //= shape[d]
            for k in range(program.n_inputs):
                offs[k] += c * int(st[k][d])
        xs = [np.float32(memory[ptrs[k]][offs[k]]) for k in range(program.n_inputs)]
        temps = []
        for op, operands in program.steps:
            args = [np.array([xs[k] if kind == "in" else temps[k]], np.float32) for kind, k in operands]
            temps.append(np.float32(codegen.OPS[op].numpy(*args)[0]))
        for slot, j in enumerate(program.outputs):
            memory[ptrs[program.n_inputs + slot]][i] = temps[j]


def test_parameter_layout_and_index_arithmetic_compute_the_reference():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 1, 4)).astype(np.float32)
    b = np.float32(1.4142135)
    c = np.ones((3, 1), np.float32)
    out_shape = (2, 3, 4)
    out = np.zeros(24, np.float32)
    memory = {1000: a.reshape(-1), 2000: np.array([b]), 3000: c.reshape(-1), 4000: out}
    shapes = [a.shape, (), c.shape]
    strides = [codegen.broadcast_strides(s, None, 4, out_shape) for s in shapes]
    words = codegen.pack_params(GELU_CHAIN, [1000, 2000, 3000, 4000], out_shape, strides)
    assert words.dtype == np.int64 and len(words) == 4 + 1 + 3 + 3 * 3 and words[4] == 24
    _run_like_the_kernel(GELU_CHAIN, words, memory)
    expected = codegen.reference(GELU_CHAIN, [a, np.array(b), c])[0]
    np.testing.assert_allclose(out.reshape(out_shape), expected, rtol=1e-6)


def test_pack_params_checks_what_it_is_given():
    with pytest.raises(ValueError, match="rank 2, the kernel was made for 3"):
        codegen.pack_params(GELU_CHAIN, [0] * 4, (2, 3), [[0, 0]] * 3)
    with pytest.raises(ValueError, match="do not match"):
        codegen.pack_params(GELU_CHAIN, [0] * 3, (2, 3, 4), [[0, 0, 0]] * 3)
    high = codegen.pack_params(_single("Relu", "float32", 1), [2**63 + 8, 16], (5,), [[1]])
    assert int(np.int64(high[0]).astype(np.uint64)) == 2**63 + 8  # pointers keep all 64 bits


MODELS = {
    "gelu_chain": ([("Div", ["x", "s2"], ["d"]), ("Erf", ["d"], ["e"]), ("Add", ["e", "one"], ["p"]),
                    ("Mul", ["x", "p"], ["m"]), ("Mul", ["m", "half"], ["y"])],
                   [("s2", np.float32(1.4142135)), ("one", np.float32(1)), ("half", np.float32(0.5))], (2, 3, 8)),
    "broadcast_unary": ([("Add", ["x", "bias"], ["a"]), ("Sigmoid", ["a"], ["s"]), ("Tanh", ["s"], ["t"]),
                         ("Sub", ["t", "bias"], ["u"]), ("Relu", ["u"], ["r"]), ("Exp", ["r"], ["ex"]),
                         ("Neg", ["ex"], ["n"]), ("Abs", ["n"], ["ab"]), ("Sqrt", ["ab"], ["q"]),
                         ("Log", ["q"], ["y"])],
                        [("bias", np.linspace(-1, 1, 8, dtype=np.float32))], (2, 3, 8)),
}


@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("which", sorted(MODELS))
def test_references_of_planned_kernels_match_the_cpu_provider(which, elem):
    from onnx import helper
    specs, inits, shape = MODELS[which]
    dtype = np.float16 if elem == F16 else np.float32
    nodes = [helper.make_node(op, ins, outs) for op, ins, outs in specs]
    model = make_model(nodes, [("x", elem, shape)], [("y", elem, shape)],
                       [(n, np.asarray(v, dtype)) for n, v in inits])
    plan = plan_subgraph(whole_subgraph(model))
    assert len(plan.steps) == 1 and isinstance(plan.steps[0], Elementwise)  # one fused kernel
    step = plan.steps[0]
    assert step.outputs == ["y"] and len(step.program.steps) == len(specs)
    x = np.random.default_rng(1).uniform(0.1, 2.0, shape).astype(dtype)
    values = {"x": x, **{n: np.asarray(v, dtype) for n, v in inits}}
    got = codegen.reference(step.program, [values[n] for n in step.inputs])[0]
    cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = cpu.run(None, {"x": x})[0]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    tol = 2e-3 if elem == F16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32), rtol=tol, atol=tol)
