"""Pipelines: pure Polars functions from raw tables to marts."""
