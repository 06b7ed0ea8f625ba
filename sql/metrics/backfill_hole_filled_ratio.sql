-- slurmscope_backfill_hole_filled_ratio (gauge): mart_occupancy (latest bucket before now)
CREATE OR REPLACE MACRO metric_backfill_hole_filled_ratio(cluster_name, now) AS TABLE
    SELECT cluster, "partition", gpu_model, hole_filled_share AS value FROM mart_occupancy
                     WHERE cluster = cluster_name AND hole_filled_share IS NOT NULL
                       AND bucket_start = (SELECT max(bucket_start) FROM mart_occupancy
                           WHERE cluster = cluster_name
                                           AND bucket_start < now);
