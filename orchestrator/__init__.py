"""Segment orchestrator for long multi-node training on Slurm."""

__version__ = "0.1.0"
