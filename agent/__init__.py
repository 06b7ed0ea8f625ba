"""The per-GPU-node program (`slurmscope agent`): GPU telemetry, health and GPU-to-job attribution, spooled.

Why it is built this way (docs/nvml.md has the full story): it samples NVML, attributes GPUs to jobs from
the prolog's mapping files, reads XIDs from NVML events and the kernel log, serves a node-local /metrics,
and hands per-minute aggregates to the central collector only through spool files (slurmscope.spool), so
it never needs the database or slurmctld. It imports neither polars nor duckdb: it must stay small on
every GPU node.
"""
