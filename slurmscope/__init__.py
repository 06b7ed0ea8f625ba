"""slurmscope: observability and accounting analytics for Slurm GPU clusters."""

__version__ = "0.1.0"
