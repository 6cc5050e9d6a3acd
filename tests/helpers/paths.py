"""Where the tests find the project and the real data they read.

MNIST's four IDX files: $TRASHFIRE_MNIST_ROOT, else the shared data folder beside the checkout
(`../shared/data/mnist`, where CI puts it); tests that need them skip where neither is there."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MNIST_ROOT = Path(os.environ.get("TRASHFIRE_MNIST_ROOT") or ROOT.parent / "shared" / "data" / "mnist")
