-- slurmscope_fairshare_effective_usage_ratio (gauge): shares (latest sshare, account rows)
CREATE OR REPLACE MACRO metric_fairshare_effective_usage_ratio(cluster_name, now) AS TABLE
    SELECT cluster, account, effectv_usage AS value
    FROM shares
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM shares
        WHERE cluster = cluster_name AND snapshot_time <= now) AND "user" = '' AND effectv_usage IS NOT NULL;
