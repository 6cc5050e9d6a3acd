"""The timing stage's tables: `experiments` compiles the attack records into reports/experiments.csv."""
