"""DDN, Decoupled Direction and Norm (Rony et al. 2019), adv-lib's arithmetic
(trashfire.attacks.minimal_norm): l2; its strength is its step budget. Its settings'
defaults are adv-lib's (`MinimalSettings`). Its budget and run are FMN's: the minimal-norm
search picks DDN's arithmetic by the loop's name."""

from __future__ import annotations

from trashfire.attacks.loops import TorchLoop
from trashfire.attacks.loops.fmn import budget, run

LOOP = TorchLoop(name="ddn", budget=budget, run=run)
