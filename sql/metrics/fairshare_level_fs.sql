-- slurmscope_fairshare_level_fs (gauge): shares (latest sshare, account rows)
CREATE OR REPLACE MACRO metric_fairshare_level_fs(cluster_name, now) AS TABLE
    SELECT cluster, account, level_fs AS value
    FROM shares
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM shares
        WHERE cluster = cluster_name AND snapshot_time <= now) AND "user" = '' AND level_fs IS NOT NULL;
