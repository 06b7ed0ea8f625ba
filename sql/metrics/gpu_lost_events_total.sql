-- slurmscope_gpu_lost_events_total (counter): gpu_events (event_type = 'gpu_lost' or XID 79)
CREATE OR REPLACE MACRO metric_gpu_lost_events_total(cluster_name, now) AS TABLE
    SELECT cluster, node, 'central' AS source, count(*) AS value
    FROM gpu_events
    WHERE cluster = cluster_name AND (event_type = 'gpu_lost' OR (event_type = 'xid' AND xid = 79))
        AND event_time <= now
    GROUP BY ALL;
