-- slurmscope_sdiag_agent_queue_size (gauge): sched_stats (latest sdiag)
CREATE OR REPLACE MACRO metric_sdiag_agent_queue_size(cluster_name, now) AS TABLE
    SELECT cluster, agent_queue_size AS value
    FROM sched_stats
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM sched_stats
        WHERE cluster = cluster_name AND snapshot_time <= now) AND agent_queue_size IS NOT NULL;
