"""The contract for a provider whose library or hardware is absent, checked in a fresh interpreter
(registration happens once per process): the registry reports it unavailable with the reason, it is
not among the available providers, and a session that asks for it warns and runs on the CPU provider
with the right result — nothing is faked. Plugins call this from their own tests, with the
environment that makes their library unfindable.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

_SCRIPT = """
import warnings, numpy as np
from onnx import helper, TensorProto
import ort_core as ort
from ort_core.plugins.manager import get_registry
info = get_registry().providers[{provider!r}].info
assert not info.available and {reason!r} in info.reason, info
assert {provider!r} not in ort.get_available_providers()
node = helper.make_node("Relu", ["x"], ["y"])
vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "xy"]
model = helper.make_model(helper.make_graph([node], "g", vi[:1], vi[1:]))
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    sess = ort.InferenceSession(model.SerializeToString(), providers=[{provider!r}])
assert any("is unavailable" in str(m.message) for m in w), [str(m.message) for m in w]
assert sess.get_providers() == ["CPUExecutionProvider"]
print(sess.run(None, {{"x": np.array([-1, 2], np.float32)}})[0].tolist())
"""


def check_falls_back_when_unavailable(provider: str, env: dict[str, str], reason_contains: str) -> None:
    """Raise AssertionError (with the child's output) unless, with ``env`` added to the environment,
    ``provider`` registers as unavailable with a reason containing ``reason_contains`` and a session
    asking for it computes Relu([-1, 2]) = [0, 2] on the CPU provider."""
    code = textwrap.dedent(_SCRIPT.format(provider=provider, reason=reason_contains))
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("[0.0, 2.0]"), done.stdout
