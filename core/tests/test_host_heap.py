"""numpy's freed memory kept for reuse while the CPU arena is on (memory/host_heap.py). The setting is the
whole process's, so each case runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = """
import json, resource, sys
import numpy as np
import onnx
from onnx import helper, TensorProto
import ort_core
from ort_core.memory import host_heap

arena = sys.argv[1] == "1"
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
opts = ort_core.SessionOptions()
opts.enable_cpu_mem_arena = arena
sess = ort_core.InferenceSession(helper.make_model(g).SerializeToString(), opts, providers=["CPUExecutionProvider"])

def faults_of_a_fresh_3_mib_array():  # under numpy's 4 MiB huge-page hint: 768 pages of 4 KiB when new
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = np.ones(3 << 18, np.float32)
    del a
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

faults_of_a_fresh_3_mib_array()
print(json.dumps({"applied": host_heap._state["applied"], "done": host_heap._state["done"],
                  "faults": faults_of_a_fresh_3_mib_array()}))
"""


def _run(arena: str, **env) -> dict:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", SCRIPT, arena], capture_output=True, text=True, timeout=120,
                         env={**environ, **env})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _small_pages() -> bool:
    """Whether fresh anonymous memory comes in 4 KiB pages (transparent huge pages not forced on)."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[always]" not in f.read()
    except OSError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_with_the_arena_a_freed_large_array_is_reused_without_new_pages():
    got = _run("1")
    assert got["applied"] is True
    assert got["faults"] < 16  # the freed 3 MiB come back from the heap, no page is new


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_without_the_arena_or_with_the_users_own_setting_nothing_changes():
    off = _run("0")
    users = _run("1", MALLOC_MMAP_THRESHOLD_="131072")
    opted_out, zero = _run("1", ORT_CORE_KEEP_MALLOC="1"), _run("1", ORT_CORE_KEEP_MALLOC="0")
    assert off["done"] is False and users["done"] is True and users["applied"] is False
    assert opted_out["applied"] is False and zero["applied"] is True
    if _small_pages():  # glibc's defaults: the 3 MiB array is a fresh mapping each time
        assert off["faults"] >= 700 and users["faults"] >= 700 and opted_out["faults"] >= 700
