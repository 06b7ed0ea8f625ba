-- Retention (slurmscope/retention.py, docs/configuration.md#retention): NVML minute rows kept N days, then
-- hourly rollups; sacct history optionally kept only in the Parquet lake after M months; what each run removed.

-- gpu_samples without its primary-key index. The index cost 96 of the 122 bytes a minute row took on disk
-- (benchmarks/fleet.py, docs/benchmarks.md#fleet-10000-gpus-30-days) and made every spool load probe it;
-- the loader keeps (cluster, node, gpu_uuid, minute) unique itself (collectors/nvml.py, tested). Rows are
-- rewritten in minute order: DuckDB's per-row-group min/max then prune every time-range read, and
-- retention's deletes free whole old row groups whose blocks new minutes reuse.
CREATE TABLE gpu_samples_unkeyed AS SELECT * FROM gpu_samples ORDER BY minute, cluster, node, gpu_uuid;
DROP TABLE gpu_samples;
ALTER TABLE gpu_samples_unkeyed RENAME TO gpu_samples;
ALTER TABLE gpu_samples ALTER COLUMN cluster SET NOT NULL;
ALTER TABLE gpu_samples ALTER COLUMN node SET NOT NULL;
ALTER TABLE gpu_samples ALTER COLUMN gpu_uuid SET NOT NULL;
ALTER TABLE gpu_samples ALTER COLUMN minute SET NOT NULL;

-- One row per GPU, UTC hour, the jobs that held it and the activity source (each minute that counted errors
-- apart: slurmscope.rollup.aggregate_sql), for the minutes retention rolled up: every gpu_samples
-- column but `minute`, each aggregated by its rule in slurmscope/rollup.py (RULES), plus how many minutes had
-- a row and which (bit k of minute_mask = minute k of the hour). `jobs` is the whole-GPU jobs of gpu_jobs
-- whose intervals overlap those minutes (job ids, sorted, comma-separated; '' when none; `<` / `>` marks a job
-- whose interval starts / ends inside the minute), so the minutes of two jobs sharing an hour are never
-- averaged together (slurmscope.rollup.segment_sql). Its columns are gpu_samples' as they stand when this
-- migration runs; a later migration that adds a gpu_samples column adds it here too (a test checks both).
CREATE TABLE gpu_samples_hourly AS
SELECT cluster, node, gpu_uuid, minute AS hour, CAST('' AS VARCHAR) AS jobs, CAST(0 AS INTEGER) AS minutes,
       CAST(0 AS BIGINT) AS minute_mask, * EXCLUDE (cluster, node, gpu_uuid, minute)
FROM gpu_samples LIMIT 0;
ALTER TABLE gpu_samples_hourly ALTER COLUMN cluster SET NOT NULL;
ALTER TABLE gpu_samples_hourly ALTER COLUMN node SET NOT NULL;
ALTER TABLE gpu_samples_hourly ALTER COLUMN gpu_uuid SET NOT NULL;
ALTER TABLE gpu_samples_hourly ALTER COLUMN hour SET NOT NULL;
ALTER TABLE gpu_samples_hourly ALTER COLUMN jobs SET NOT NULL;
ALTER TABLE gpu_samples_hourly ALTER COLUMN minutes SET NOT NULL;
ALTER TABLE gpu_samples_hourly ALTER COLUMN minute_mask SET NOT NULL;

-- Where each kind of history now starts in DuckDB, per cluster: `gpu_samples` = the instant before which
-- minutes are read from gpu_samples_hourly; `jobs` = the first month whose attempts are all still here.
CREATE TABLE retention_state (
    cluster            VARCHAR NOT NULL,
    name               VARCHAR NOT NULL,
    boundary           TIMESTAMPTZ NOT NULL,
    updated_at         TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (cluster, name)
);

-- One row per table a retention step touched: rows removed (and hourly rows written), over which range.
CREATE TABLE retention_runs (
    cluster            VARCHAR NOT NULL,
    run_at             TIMESTAMPTZ NOT NULL,
    table_name         VARCHAR NOT NULL,
    range_start        TIMESTAMPTZ,        -- first and last time-column value removed
    range_end          TIMESTAMPTZ,
    rows_removed       BIGINT NOT NULL,
    rows_written       BIGINT NOT NULL,    -- gpu_samples_hourly rows written for them (0 elsewhere)
    status             VARCHAR NOT NULL,   -- 'ok' | 'waiting' (sacct month not yet complete in the lake)
    detail             VARCHAR
);
