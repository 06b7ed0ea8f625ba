-- The latest sampled minute of each GPU at `now`, at most 15 minutes old: what the per-GPU families read.
CREATE OR REPLACE MACRO gpu_latest(cluster_name, now) AS TABLE
    SELECT * FROM gpu_samples
    WHERE cluster = cluster_name AND minute <= now AND minute > now - INTERVAL '15 minutes'
    QUALIFY row_number() OVER (PARTITION BY node, gpu_uuid ORDER BY minute DESC) = 1;
