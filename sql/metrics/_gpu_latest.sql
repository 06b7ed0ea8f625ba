-- The latest sampled minute of each GPU at `now`, at most 15 minutes old: what the per-GPU families read.
-- gpu_minutes (slurmscope/rollup.py): a `now` older than retention's boundary (a backfill render) reads the
-- hour's rollup back as minutes.
CREATE OR REPLACE MACRO gpu_latest(cluster_name, now) AS TABLE
    SELECT * FROM gpu_minutes(cluster_name, now - INTERVAL '15 minutes' + INTERVAL '1 microsecond',
                              now + INTERVAL '1 microsecond')
    QUALIFY row_number() OVER (PARTITION BY node, gpu_uuid ORDER BY minute DESC) = 1;
