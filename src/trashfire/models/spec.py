"""The model floor's settings, light (no torch): what a defence's stage may be (see
trashfire.core.grid: a train-time defence is a training cell of its own, a predict-time one
reuses the undefended weights), the optimisers and the learning-rate schedules training runs."""

DEFENCE_STAGES = ("none", "train", "predict")
LR_SCHEDULES = ("constant", "step_half", "one_cycle")
OPTIMISERS = ("sgd", "adam")  # sgd: momentum and weight decay (TRASHFIRE, 004); adam: torch's defaults but lr
