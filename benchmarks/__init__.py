"""Benchmarks, one module per subject, run from the repository root as `python -m benchmarks.<subject>`."""
