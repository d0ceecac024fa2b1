"""``ort-conformance --plugin`` errors that need no install: clear messages, exit status 2, nothing run;
and how a folder or a wheel is told apart and named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ort_conformance import install

FIXTURE = Path(__file__).parent / "fixtures" / "outside" / "ort-ep-numpyish"


def _cli(*args, cwd=None) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "ort_conformance.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd)
    return proc.returncode, proc.stdout + proc.stderr


def test_folder_and_wheel_are_named(tmp_path):
    folder = install.resolve(str(FIXTURE))
    assert (folder.kind, folder.distribution, folder.path) == ("folder", "ort-ep-numpyish", str(FIXTURE))
    wheel = tmp_path / "ort_ep_numpyish-0.3.1-py3-none-any.whl"
    wheel.write_bytes(b"")
    assert install.resolve(str(wheel)).distribution == "ort_ep_numpyish"
    assert install.normalize("Ort_Ep.NumpyISH") == "ort-ep-numpyish"


@pytest.mark.parametrize("setup, args, message", [
    ("empty", ["--plugin", "{tmp}"], "has no pyproject.toml"),
    ("none", ["--plugin", "{tmp}/nowhere"], "no such folder or wheel, nor an installed distribution"),
    ("file", ["--plugin", "{tmp}/notes.txt"], "is a file but not a wheel"),
    ("none", ["--no-install"], "give --provider NAME, --plugin PATH_OR_WHEEL, or both"),
    ("none", ["--provider", "CPUExecutionProvider", "--no-install"], "--no-install goes with --plugin"),
    ("none", ["--plugin", "ort-ep-example", "--no-install", "--provider", "Nope"],
     "ort-ep-example does not register Nope; it registers ExampleExecutionProvider"),
])
def test_errors_are_clear(tmp_path, setup, args, message):
    if setup == "file":
        (tmp_path / "notes.txt").write_text("not a wheel")
    code, out = _cli(*[a.format(tmp=tmp_path) for a in args], cwd=tmp_path)
    assert code == 2 and message in out, out[-2000:]


def test_help_says_it_installs_into_the_current_environment():
    code, out = _cli("--help")
    assert code == 0 and "installs into the CURRENT environment" in out and "--no-install" in out
