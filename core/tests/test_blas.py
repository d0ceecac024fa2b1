"""numpy's OpenBLAS kernel choice: ort-core picks the AVX-512 kernels only when imported before numpy
and only when the user set nothing; blas_info() reports what runs. Each case runs in a fresh process
(OpenBLAS chooses its kernels once, when it loads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ort_core.blas import _AVX512_FLAGS, AVX512_CORE, ENV, cpu_flags

AVX512 = _AVX512_FLAGS <= cpu_flags()


def run(code: str, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in (ENV, "ORT_CORE_KEEP_BLAS_CORETYPE")}
    environ.update(env)
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=60,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


REPORT = "import json, os; print(json.dumps(dict(ort_core.blas_info(), env=os.environ.get('OPENBLAS_CORETYPE'))))"


@pytest.mark.skipif(not AVX512, reason="this CPU has no AVX-512: nothing to choose")
def test_imported_first_on_avx512_picks_avx512_kernels():
    info = run(f"import ort_core, numpy; {REPORT}")
    assert info["env"] == AVX512_CORE and info["set_by_ort_core"]
    if info["core"]:  # numpy built on OpenBLAS: the library took the choice
        assert info["core"] == AVX512_CORE and not info["advice"]


def test_a_value_the_user_set_wins():
    info = run(f"import ort_core, numpy; {REPORT}", OPENBLAS_CORETYPE="Haswell")
    assert info["env"] == "Haswell" and not info["set_by_ort_core"]
    if info["core"] and AVX512:
        assert info["core"] == "Haswell" and "OPENBLAS_CORETYPE='Haswell' chose them" in info["advice"]


def test_numpy_imported_first_is_left_alone_and_reported():
    info = run(f"import numpy, ort_core; {REPORT}")
    assert info["env"] is None and not info["set_by_ort_core"]
    if info["core"] and AVX512 and info["core"].lower() not in ("skylakex", "cooperlake", "sapphirerapids"):
        assert "numpy was imported before ort_core" in info["advice"]


def test_opt_out_keeps_openblas_choice():
    info = run(f"import ort_core, numpy; {REPORT}", ORT_CORE_KEEP_BLAS_CORETYPE="1")
    assert info["env"] is None and not info["set_by_ort_core"]
