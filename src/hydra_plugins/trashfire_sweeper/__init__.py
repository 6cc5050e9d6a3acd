"""Hydra discovers the trashfire Optuna sweeper in this namespace package."""
