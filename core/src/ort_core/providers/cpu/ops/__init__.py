"""CPU kernels, one module per ONNX operator family; importing this package registers them all.

Modules register themselves with ``providers.cpu.registry.register``; nothing here
dispatches or executes.
"""

import importlib
import pkgutil

for _mod in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_mod.name}")
