"""Collectors: one module per Slurm or NVML source; fetch (I/O), parse (pure), load (one transaction)."""
