"""ort_core.quantization.matmul_nbits_quantizer: MatMul weights quantized to MatMulNBits bit for bit as
onnxruntime's quantizer does (its quantized model is the yardstick), the quantized models running alike on
ort-core and onnxruntime, the options that select nodes, and the settings that are refused."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import matmul_nbits_quantizer as theirs

import ort_core
from ort_core.quantization import QuantFormat, matmul_nbits_quantizer

K, N = 200, 48  # K is not a multiple of any block size used: the last block is padded


def _mlp(dtype=np.float32, shared=False) -> onnx.ModelProto:
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((K, N)) * 0.05).astype(dtype)
    w2 = (rng.standard_normal((N, K)) * 0.1).astype(dtype)
    w2[:, :16] = 0  # an all-zero block
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    outputs = [helper.make_tensor_value_info("y", elem, ("b", K))]
    if shared:  # w1 also read by an Add that stays float
        nodes.append(helper.make_node("Add", ["w1", "w1"], ["w1x2"], name="add"))
        outputs.append(helper.make_tensor_value_info("w1x2", elem, (K, N)))
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", elem, ("b", K))], outputs,
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    return onnx.ModelProto.FromString(model.SerializeToString())


def _initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


@pytest.mark.parametrize("bits, block, symmetric", [(4, 32, False), (4, 128, True), (8, 16, False), (8, 64, True),
                                                    (2, 32, False), (2, 32, True)])
def test_weights_are_quantized_as_onnxruntime_quantizes_them(bits, block, symmetric):
    ours = matmul_nbits_quantizer.MatMulNBitsQuantizer(_copy(_mlp()), bits=bits, block_size=block,
                                                       is_symmetric=symmetric, accuracy_level=4)
    ours.process()
    ref = theirs.MatMulNBitsQuantizer(_copy(_mlp()), bits=bits, block_size=block, is_symmetric=symmetric,
                                      accuracy_level=4)
    ref.process()
    got, want = _initializers(ours.model.model), _initializers(ref.model.model)
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    ops = [(n.op_type, n.domain, {a.name: helper.get_attribute_value(a) for a in n.attribute})
           for n in ours.model.model.graph.node]
    assert ops[0] == ("MatMulNBits", "com.microsoft",
                      {"K": K, "N": N, "bits": bits, "block_size": block, "accuracy_level": 4})
    assert ours.quantized == ["mm1", "mm2"]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_quantized_models_run_alike_on_ort_core_and_onnxruntime_and_stay_close_to_float(dtype, tmp_path):
    model = _mlp(dtype)
    q = matmul_nbits_quantizer.MatMulNBitsQuantizer(_copy(model), block_size=32)
    q.process()
    path = tmp_path / "q4.onnx"
    q.model.save_model_to_file(path)
    x = np.random.default_rng(1).standard_normal((3, K)).astype(dtype)
    ours = ort_core.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ref = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    scale = float(np.max(np.abs(ref.astype(np.float32))))
    tol = 2e-3 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(ours.astype(np.float32), ref.astype(np.float32), atol=tol * scale, rtol=0)
    full = ort_core.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    full = full.run(None, {"x": x})[0]
    err = float(np.max(np.abs(ours.astype(np.float32) - full.astype(np.float32)))) / scale
    assert 1e-4 < err < 0.15  # 4-bit weights: close to float, and not the float model itself


def test_nodes_to_exclude_and_include_and_a_shared_weight():
    q = matmul_nbits_quantizer.MatMulNBitsQuantizer(_copy(_mlp()), nodes_to_exclude=["mm2"], block_size=32)
    q.process()
    assert q.quantized == ["mm1"] and [n.op_type for n in q.model.model.graph.node] == ["MatMulNBits", "Relu",
                                                                                      "MatMul"]
    q = matmul_nbits_quantizer.MatMulNBitsQuantizer(_copy(_mlp()), nodes_to_include=["mm2"], block_size=32)
    q.process()
    assert q.quantized == ["mm2"] and "w1" in _initializers(q.model.model) and "w2" not in _initializers(q.model.model)
    shared = matmul_nbits_quantizer.MatMulNBitsQuantizer(_copy(_mlp(shared=True)), block_size=32)
    shared.process()
    inits = _initializers(shared.model.model)
    assert "w1" in inits and "w1_Q4" in inits and "w2" not in inits  # the float w1 stays for the Add
    assert sum(o.domain == "com.microsoft" for o in shared.model.model.opset_import) == 1


def test_settings_it_does_not_offer_are_refused_by_name():
    config = matmul_nbits_quantizer.DefaultWeightOnlyQuantConfig
    with pytest.raises(ValueError, match="bits=3"):
        config(bits=3)
    with pytest.raises(ValueError, match="block_size=24"):
        config(block_size=24)
    with pytest.raises(NotImplementedError, match="QuantFormat.QOperator"):
        config(quant_format=QuantFormat.QDQ)
    with pytest.raises(NotImplementedError, match="GatherBlockQuantized"):
        config(op_types_to_quantize=("MatMul", "Gather"))
    with pytest.raises(NotImplementedError, match="only the DEFAULT"):
        matmul_nbits_quantizer.MatMulNBitsQuantizer(_mlp(), algo_config=theirs.HQQWeightOnlyQuantConfig())
