"""First contact: an extra installs from a local wheelhouse into a fresh virtual environment exactly as the
README says (`nox -s wheels`, then `pip install --find-links wheelhouse "ort-core[openvino]"`), and the
provider it brings is there. Third-party dependencies come from the package index (or pip's cache)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_the_openvino_extra_installs_from_the_wheelhouse_in_a_fresh_venv(tmp_path):
    wheelhouse, env = tmp_path / "wheelhouse", tmp_path / "venv"
    # what `nox -s wheels` runs, for the two distributions this extra needs
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheelhouse), "./core",
                    "./plugins/ort-ep-openvino"], cwd=ROOT, check=True, timeout=600)
    venv.create(env, with_pip=True)
    python = str(env / "bin" / "python")
    done = subprocess.run([python, "-m", "pip", "install", "-q", "--find-links", str(wheelhouse), "ort-core[openvino]"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    code = ("import numpy as np, ort_core as ort; print(ort.get_available_providers()); "
            "print(ort.__file__)")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    providers, location = out.stdout.strip().splitlines()[-2:]
    assert "OpenVINOExecutionProvider" in providers and "CPUExecutionProvider" in providers
    assert location.startswith(str(env))  # the installed wheel, not this checkout
