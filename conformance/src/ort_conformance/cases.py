"""The test cases the suite runs, all taken from the installed onnx wheel.

Node cases come from ``onnx.backend.test.loader.load_node_model_tests()``; model cases from the
wheel's data folders (light, simple, pytorch-converted, pytorch-operator). This module only
loads cases; running them is runner.py's job.
"""

from __future__ import annotations

import functools
import glob
import os
import warnings
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
MODEL_KINDS = ("light", "simple", "pytorch-converted", "pytorch-operator")


@dataclass
class Case:
    name: str
    kind: str  # 'node' or one of MODEL_KINDS
    rtol: float
    atol: float
    _model: onnx.ModelProto | None = field(default=None, repr=False)
    _path: str | None = None
    _data: list | None = field(default=None, repr=False)
    _loader: object = field(default=None, repr=False)

    @property
    def model(self) -> onnx.ModelProto:
        if self._model is None:
            self._model = onnx.load(self._path)
        return self._model

    @property
    def data_sets(self) -> list[tuple[list, list]]:
        if self._data is None:
            self._data = self._loader(self)
        return self._data

    @property
    def ops(self) -> list[str]:
        """Distinct op types of the main graph, in order of first appearance."""
        return list(dict.fromkeys(
            (f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type)
            for n in self.model.graph.node))

    def feeds(self, inputs: list) -> dict:
        """Map a data set's positional inputs to the graph's (non-initializer) input names."""
        inits = {i.name for i in self.model.graph.initializer}
        names = [i.name for i in self.model.graph.input if i.name not in inits]
        return dict(zip(names, inputs))


@functools.lru_cache(maxsize=1)
def node_cases() -> tuple[Case, ...]:
    from onnx.backend.test.loader import load_node_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators overflow on purpose in places
        raw = load_node_model_tests()
    out = []
    for tc in raw:
        data = [([_normalize(x) for x in i], [_normalize(x) for x in o]) for i, o in tc.data_sets]
        out.append(Case(tc.name, "node", tc.rtol, tc.atol, _model=tc.model, _data=data))
    return tuple(sorted(out, key=lambda c: c.name))


@functools.lru_cache(maxsize=1)
def model_cases() -> tuple[Case, ...]:
    out = []
    for path in sorted(glob.glob(os.path.join(DATA, "light", "*.onnx"))):
        name = "test_" + os.path.basename(path)[len("light_"):-len(".onnx")]
        out.append(Case(name, "light", 1e-3, 1e-7, _path=path, _loader=_light_data))
    from onnx.backend.test.loader import load_model_tests

    for kind in MODEL_KINDS[1:]:
        for tc in sorted(load_model_tests(kind=kind), key=lambda t: t.name):
            out.append(Case(tc.name, kind, tc.rtol, tc.atol, _path=os.path.join(tc.model_dir, "model.onnx"),
                            _loader=_dir_data))
    return tuple(out)


def _normalize(x):
    """Some generated cases hold TensorProtos (exotic dtypes) instead of arrays."""
    return numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x


def _light_data(case: Case) -> list[tuple[list, list]]:
    """Light models ship expected outputs only; inputs are onnx's runner's arange(n)/n."""
    inits = {i.name for i in case.model.graph.initializer}
    inputs = []
    for vi in case.model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        inputs.append((np.arange(n).reshape(shape) / n).astype(np.float32))
    expected = numpy_helper.to_array(onnx.load_tensor(case._path.replace(".onnx", "_output_0.pb")))
    return [(inputs, [expected])]


def _dir_data(case: Case) -> list[tuple[list, list]]:
    folder = os.path.dirname(case._path)
    graph = case.model.graph
    inits = {i.name for i in graph.initializer}
    in_types = [v.type for v in graph.input if v.name not in inits]
    out_types = [v.type for v in graph.output]
    sets = []
    for ds in sorted(glob.glob(os.path.join(folder, "test_data_set_*"))):
        n_in = len(glob.glob(os.path.join(ds, "input_*.pb")))
        n_out = len(glob.glob(os.path.join(ds, "output_*.pb")))
        inputs = [_read(os.path.join(ds, f"input_{k}.pb"), in_types[k] if k < len(in_types) else None)
                  for k in range(n_in)]
        outputs = [_read(os.path.join(ds, f"output_{k}.pb"), out_types[k] if k < len(out_types) else None)
                   for k in range(n_out)]
        sets.append((inputs, outputs))
    return sets


def _read(path: str, type_proto):
    with open(path, "rb") as f:
        data = f.read()
    which = type_proto.WhichOneof("value") if type_proto is not None else "tensor_type"
    if which == "sequence_type":
        p = onnx.SequenceProto()
        p.ParseFromString(data)
        return numpy_helper.to_list(p)
    if which == "optional_type":
        p = onnx.OptionalProto()
        p.ParseFromString(data)
        return numpy_helper.to_optional(p)
    if which == "map_type":
        p = onnx.MapProto()
        p.ParseFromString(data)
        return numpy_helper.to_dict(p)
    t = onnx.TensorProto()
    t.ParseFromString(data)
    return numpy_helper.to_array(t)
