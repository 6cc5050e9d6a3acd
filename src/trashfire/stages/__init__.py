"""One thin module per DVC stage, in pipeline order: a `STAGE` declaration, `run(cfg)` and `main`."""

ORDER = ("prepare", "train", "attack", "brittle", "timing", "survival", "aggregate", "figures")
