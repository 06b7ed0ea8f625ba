-- slurmscope_controller_up (gauge): controller_pings (latest scontrol ping)
CREATE OR REPLACE MACRO metric_controller_up(cluster_name, now) AS TABLE
    SELECT cluster, host, coalesce(role, '') AS role, CASE WHEN up THEN 1 ELSE 0 END AS value
    FROM controller_pings
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM controller_pings
        WHERE cluster = cluster_name AND snapshot_time <= now);
