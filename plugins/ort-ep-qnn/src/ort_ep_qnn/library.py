"""Where Qualcomm's QNN HTP backend library is: found, never bundled.

Looks, in order, at ``$ORT_EP_QNN_BACKEND_PATH`` (a file), ``$QNN_SDK_ROOT`` (a QNN / QAIRT SDK) and the
installed ``onnxruntime-qnn`` distribution (whose wheel carries the QNN libraries), without importing
anything; a ``backend_path`` provider option names the file for one session. Loading is ``runtime``'s.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import platform
import sys

BACKEND_PATH_ENV = "ORT_EP_QNN_BACKEND_PATH"
SDK_ROOT_ENV = "QNN_SDK_ROOT"
WHEEL = "onnxruntime-qnn"
WHEEL_PACKAGE = "onnxruntime_qnn"

HOW_TO_GET = (f"pip install {WHEEL} (its wheel carries Qualcomm's QNN libraries), or set {SDK_ROOT_ENV} to a "
              f"QNN/QAIRT SDK, or {BACKEND_PATH_ENV} to the backend library")


def htp_file_name() -> str:
    return "QnnHtp.dll" if sys.platform == "win32" else "libQnnHtp.so"


def system_file_name() -> str:
    """QNN's system library (reads serialized contexts back), beside the backend library in every SDK."""
    return "QnnSystem.dll" if sys.platform == "win32" else "libQnnSystem.so"


def _sdk_lib_dirs(root: str) -> list[str]:
    """The SDK's library folders for this platform (the SDK ships one per target under lib/)."""
    machine = platform.machine().lower()
    if sys.platform == "win32":
        patterns = ["arm64x-windows-msvc", "aarch64-windows-msvc"] if machine in ("arm64", "aarch64") \
            else ["x86_64-windows-msvc"]
    elif machine in ("x86_64", "amd64"):
        patterns = ["x86_64-linux-clang"]
    else:
        patterns = ["aarch64-ubuntu-gcc*", "aarch64-oe-linux-gcc*", "aarch64-android"]
    found: list[str] = []
    for pattern in patterns:
        found += sorted(glob.glob(os.path.join(root, "lib", pattern)))
    return found


def wheel_dir() -> str | None:
    """The folder of the installed onnxruntime_qnn package (found, not imported), or None."""
    try:
        spec = importlib.util.find_spec(WHEEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def find_backend() -> tuple[str | None, str]:
    """(path of the HTP backend library, where it was found) or (None, why none was found)."""
    explicit = os.environ.get(BACKEND_PATH_ENV)
    if explicit:
        if os.path.isfile(explicit):
            return explicit, f"${BACKEND_PATH_ENV}"
        return None, f"${BACKEND_PATH_ENV} names {explicit}, which does not exist; unset it or {HOW_TO_GET}"
    name = htp_file_name()
    root = os.environ.get(SDK_ROOT_ENV)
    if root:
        for folder in _sdk_lib_dirs(root):
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                return path, f"${SDK_ROOT_ENV}"
    folder = wheel_dir()
    if folder is not None:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path, f"the {WHEEL} package"
        return None, f"the installed {WHEEL} package has no {name} in {folder}; reinstall it ({HOW_TO_GET})"
    where = f" (${SDK_ROOT_ENV}={root} has no lib/<platform>/{name})" if root else ""
    return None, f"QNN's HTP backend library {name} was not found{where}: {HOW_TO_GET}"
