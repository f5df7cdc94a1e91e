"""CUDA lowerings, one module per stage family; importing this package registers them all."""

import importlib
import pkgutil

for _mod in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_mod.name}")
