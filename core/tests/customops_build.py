"""Compile C custom-op libraries for the tests with the system C compiler (skip when there is none)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from ort_core.customops import get_include


def compiler() -> str:
    """The system C compiler, or skip the calling test with the reason."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    pytest.skip("no C compiler found (tried $CC, cc, gcc, clang): the C custom-op tests compile a library; "
                "install one (e.g. apt-get install gcc) to run them")


def build_library(source: str | os.PathLike, out_dir: os.PathLike, name: str) -> str:
    """Compile ``source`` into a shared library in ``out_dir``; returns its path."""
    suffix = {"darwin": ".dylib", "win32": ".dll"}.get(sys.platform, ".so")
    out = os.path.join(os.fspath(out_dir), f"lib{name}{suffix}")
    cmd = [compiler(), "-shared", "-fPIC", "-O2", "-std=c99", "-Wall", "-I", get_include(),
           os.fspath(source), "-o", out]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"compiling {source} failed:\n{' '.join(cmd)}\n{proc.stderr}")
    return out
