"""Hydra discovers the trashfire SLURM launcher in this namespace package."""
