"""One thin module per DVC stage, in pipeline order: a `STAGE` declaration, `run(cfg)` and `main`.

`run` imports the stage's library itself, so `main` reads and checks the config before torch,
ART or lifelines load (seconds): a bad value or a missing params file is reported at once. The
import still counts as the stage's code dependency (dvc.yaml follows function-level imports)."""

ORDER = ("prepare", "train", "attack", "certify", "budget", "brittle", "timing", "survival", "aggregate", "figures")
