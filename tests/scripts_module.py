"""Load a script of ``scripts/`` as a module for its tests (the scripts are not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` executed as the module ``name``, registered in ``sys.modules`` first (dataclasses
    resolve their module's annotations through it); the module already loaded is returned as is.

    Raises:
        FileNotFoundError: no ``scripts/<name>.py``.
    """
    if name in sys.modules:
        return sys.modules[name]
    path = SCRIPTS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise FileNotFoundError(path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
