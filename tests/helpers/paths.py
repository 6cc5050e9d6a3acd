"""Where the tests find the project and the real data they read.

MNIST's four IDX files: $TRASHFIRE_MNIST_ROOT, else the shared data folder beside the checkout
(`../shared/data/mnist`, where CI puts it); tests that need them skip where neither is there."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
MNIST_ROOT = Path(os.environ.get("TRASHFIRE_MNIST_ROOT") or ROOT.parent / "shared" / "data" / "mnist")


def bench_script(name: str) -> ModuleType:
    """bench/<name>.py imported as module `name` (bench/ is scripts, not a package); registered in
    sys.modules, where its dataclasses look their module up."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
