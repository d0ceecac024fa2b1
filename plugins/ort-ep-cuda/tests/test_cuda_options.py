"""Provider options: onnxruntime's names, validated without a GPU."""

from __future__ import annotations

import pytest
from ort_ep_cuda.options import DEFAULTS, Options, default_cache_dir, parse


def test_names_are_onnxruntimes():
    assert sorted(DEFAULTS) == ["cudnn_conv_algo_search", "device_id", "do_copy_in_default_stream",
                                "enable_cuda_graph", "gpu_mem_limit", "use_tf32"]


def test_defaults_and_values_in_onnxruntimes_spellings():
    assert parse({}) == Options(0, False, "EXHAUSTIVE", 2**64 - 1, False, True)
    assert parse(None) == parse({k: v for k, v in DEFAULTS.items()})
    opts = parse({"device_id": "1", "use_tf32": 1, "cudnn_conv_algo_search": "heuristic",
                  "gpu_mem_limit": 2 * 1024**3, "enable_cuda_graph": "True", "do_copy_in_default_stream": "0"})
    assert opts == Options(1, True, "HEURISTIC", 2 * 1024**3, True, False)


@pytest.mark.parametrize("bad, message", [
    ({"device_id": "-1"}, "device_id='-1': expected a whole number >= 0"),
    ({"device_id": "gpu0"}, "device_id='gpu0': expected a whole number >= 0"),
    ({"device_id": True}, "device_id=True: expected a whole number"),
    ({"gpu_mem_limit": "0"}, "gpu_mem_limit='0': expected a whole number >= 1"),
    ({"gpu_mem_limit": str(2**64)}, "gpu_mem_limit='18446744073709551616': must be at most"),
    ({"use_tf32": "yes"}, "use_tf32='yes': expected one of 0, 1 (or true, false)"),
    ({"enable_cuda_graph": "2"}, "enable_cuda_graph='2': expected one of 0, 1"),
    ({"do_copy_in_default_stream": ""}, "do_copy_in_default_stream='': expected one of 0, 1"),
    ({"cudnn_conv_algo_search": "FAST"},
     "cudnn_conv_algo_search='FAST': expected one of EXHAUSTIVE, HEURISTIC, DEFAULT"),
    ({"arena_extend_strategy": "kSameAsRequested"}, "unknown provider option(s) ['arena_extend_strategy']; "
                                                    "CUDAExecutionProvider accepts ['cudnn_conv_algo_search'"),
])
def test_bad_values_are_named_with_the_valid_ones(bad, message):
    with pytest.raises(ValueError) as e:
        parse(bad)
    assert message in str(e.value)


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ORT_EP_CUDA_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == str(tmp_path / "c")
    monkeypatch.delenv("ORT_EP_CUDA_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_dir() == str(tmp_path / "x" / "ort-ep-cuda")
