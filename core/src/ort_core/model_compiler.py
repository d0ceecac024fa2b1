"""``ModelCompiler``: onnxruntime's ahead-of-time compilation, writing a model whose compiled subgraphs are
EPContext nodes, through the providers the SessionOptions choose (added, or by a policy).

A session is made with those options and written by ``epcontext.write_context_model`` (what session config
``ep.context_enable`` does); nothing is compiled here. Stands above the session.
"""

from __future__ import annotations

import enum
import os
import tempfile
from collections.abc import Callable
from typing import Any

from .epcontext import write_context_model
from .errors import Fail, InvalidArgument, NoSuchFile, NotImplementedOp
from .ir import save_model
from .options import GraphOptimizationLevel, SessionOptions
from .plugins.context import EMBED_MODE_KEY, FILE_PATH_KEY
from .plugins.manager import CPU
from .plugins.provider import ExecutionProvider
from .session import InferenceSession


class OrtCompileApiFlags(enum.IntFlag):
    NONE = 0
    ERROR_IF_NO_NODES_COMPILED = 1
    ERROR_IF_OUTPUT_FILE_EXISTS = 2


class ModelCompiler:
    """Compile ``input_model_path_or_bytes`` for the providers of ``sess_options`` (``add_provider``,
    ``add_provider_for_devices`` or a selection policy) into an EPContext model.

    ``embed_compiled_data_into_model``: each compiled context inside its node (True) or in a file beside the
    output model (False). ``flags``: OrtCompileApiFlags. ``graph_optimization_level``: the session's (onnxruntime's
    default for compiling, ORT_DISABLE_ALL). Subgraphs of providers that export no compiled context (the CPU
    provider's) are written as ordinary nodes; with no compiled subgraph at all, the model is written as placed
    (ERROR_IF_NO_NODES_COMPILED refuses instead).
    """

    def __init__(self, sess_options: SessionOptions, input_model_path_or_bytes: Any,
                 embed_compiled_data_into_model: bool = False, external_initializers_file_path: Any = None,
                 external_initializers_size_threshold: int = 1024, flags: int = OrtCompileApiFlags.NONE,
                 graph_optimization_level: GraphOptimizationLevel = GraphOptimizationLevel.ORT_DISABLE_ALL,
                 get_initializer_location_func: Callable | None = None) -> None:
        if not isinstance(sess_options, SessionOptions):
            raise InvalidArgument(f"ModelCompiler: sess_options must be an ort_core.SessionOptions, got "
                                  f"{type(sess_options).__name__}")
        if isinstance(input_model_path_or_bytes, (str, os.PathLike)):
            if not os.fspath(input_model_path_or_bytes):
                raise InvalidArgument("Input model path is empty")
            self._path: str | None = os.fspath(input_model_path_or_bytes)
            self._bytes: bytes | None = None
        elif isinstance(input_model_path_or_bytes, (bytes, bytearray)):
            if not input_model_path_or_bytes:
                raise InvalidArgument("Input model bytes array is empty")
            self._path, self._bytes = None, bytes(input_model_path_or_bytes)
        else:
            raise InvalidArgument(f"ModelCompiler: unable to load a model from type "
                                  f"'{type(input_model_path_or_bytes).__name__}' (give a path or bytes)")
        if get_initializer_location_func is not None:
            raise NotImplementedOp("ModelCompiler: get_initializer_location_func is not supported by ort-core; use "
                                   "external_initializers_file_path")
        if isinstance(flags, bool) or not isinstance(flags, int) or not 0 <= int(flags) <= 3:
            raise InvalidArgument(f"ModelCompiler: flags must be OrtCompileApiFlags values or-ed together, "
                                  f"got {flags!r}")
        self._embed = bool(embed_compiled_data_into_model)
        self._external = os.fspath(external_initializers_file_path) if external_initializers_file_path else ""
        self._threshold = int(external_initializers_size_threshold)
        self._flags = OrtCompileApiFlags(int(flags))
        self._options = sess_options._copy()
        self._options.graph_optimization_level = GraphOptimizationLevel(int(graph_optimization_level))

    def compile_to_file(self, output_model_path: str | os.PathLike | None = None) -> None:
        """Write the compiled model to ``output_model_path`` (default: '<input>_ctx.onnx' beside a path model)."""
        if output_model_path is None or output_model_path == "":
            if self._path is None:
                raise InvalidArgument("ModelCompiler: the input model was given as bytes: give compile_to_file an "
                                      "output path")
            output_model_path = os.path.splitext(self._path)[0] + "_ctx.onnx"
        if not isinstance(output_model_path, (str, os.PathLike)):
            raise InvalidArgument(f"Output model's filepath is of unexpected type '{type(output_model_path).__name__}'")
        path = os.fspath(output_model_path)
        if self._flags & OrtCompileApiFlags.ERROR_IF_OUTPUT_FILE_EXISTS and os.path.exists(path):
            raise Fail(f"Failed to generate EP context model since the file '{path}' exists already. Please remove "
                       "the EP context model if you want to re-generate it.")
        self._compile(path, self._embed)

    def compile_to_bytes(self) -> bytes:
        """The compiled model, serialized (compiled contexts are always embedded: there is no file beside it)."""
        with tempfile.TemporaryDirectory(prefix="ort-core-compile-") as folder:
            path = os.path.join(folder, "model_ctx.onnx")
            self._compile(path, True)
            with open(path, "rb") as f:
                return f.read()

    def compile_to_stream(self, write_function: Callable[[bytes], Any]) -> None:
        """Hand the compiled model's bytes to ``write_function``."""
        if not callable(write_function):
            raise InvalidArgument("compile_to_stream: write_function must be callable")
        write_function(self.compile_to_bytes())

    def _compile(self, path: str, embed: bool) -> None:
        if self._path is not None and not os.path.exists(self._path):
            raise NoSuchFile(f"Input model path does not exist: {self._path}")
        sess = InferenceSession(self._path if self._path is not None else self._bytes, self._options)
        config = {**self._options._config, FILE_PATH_KEY: os.path.abspath(path), EMBED_MODE_KEY: "1" if embed else "0"}
        exports = any(type(ep.ep).export_context is not ExecutionProvider.export_context
                      for name, ep in sess._instances.items() if name != CPU)
        written = exports and write_context_model(sess._model, sess._partition, sess._instances, config,
                                                  sess._model_path)
        if written:
            if self._external:
                _move_initializers(path, self._external, self._threshold)
            return
        if self._flags & OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED:
            raise Fail(f"Unable to compile any nodes: none of the session's providers ({sess.get_providers()}) "
                       "exported a compiled context. Check that they support compilation (export_context) and "
                       "run at least one subgraph of the model.")
        save_model(sess._model, path)
        if self._external:
            _move_initializers(path, self._external, self._threshold)


def _move_initializers(path: str, location: str, threshold: int) -> None:
    """Put the initializers of the model at ``path`` over ``threshold`` bytes into the file ``location``."""
    import onnx

    model = onnx.load(path)
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=os.path.relpath(os.path.abspath(location), os.path.dirname(os.path.abspath(path))),
                    size_threshold=threshold)
