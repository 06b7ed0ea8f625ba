-- slurmscope_gpu_xid_events_total (counter): gpu_events (event_type = 'xid')
CREATE OR REPLACE MACRO metric_gpu_xid_events_total(cluster_name, now) AS TABLE
    SELECT cluster, node, CAST(xid AS VARCHAR) AS xid, 'central' AS source, count(*) AS value
    FROM gpu_events
    WHERE cluster = cluster_name AND event_type = 'xid' AND xid IS NOT NULL AND event_time <= now
    GROUP BY ALL;
