-- slurmscope_occupancy_gpu_seconds_total (counter): mart_occupancy (buckets started before now)
CREATE OR REPLACE MACRO metric_occupancy_gpu_seconds_total(cluster_name, now) AS TABLE
    SELECT cluster, "partition", gpu_model, k.kind,
           sum(CASE k.kind WHEN 'idle' THEN coalesce(idle_gpu_seconds, 0)
                           WHEN 'hole' THEN coalesce(hole_gpu_seconds, 0)
                           ELSE backfill_gpu_seconds END) AS value
    FROM mart_occupancy, (VALUES ('idle'), ('hole'), ('backfill')) k(kind)
    WHERE cluster = cluster_name AND bucket_start < now GROUP BY ALL;
