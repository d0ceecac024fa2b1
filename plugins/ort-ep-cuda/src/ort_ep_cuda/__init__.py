"""ort-ep-cuda: CUDAExecutionProvider for ort-core, NVIDIA GPUs through cffi (ABI mode).

Hooks and provider object in ``plugin``; library location in ``libraries``, the C declarations in
``cuda_api``, the loaded runtime and its status checks in ``runtime``.
"""

__version__ = "0.1.0"
