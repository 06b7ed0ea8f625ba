-- slurmscope_fairshare_user_factor_ratio (gauge): shares (latest sshare, user rows)
CREATE OR REPLACE MACRO metric_fairshare_user_factor_ratio(cluster_name, now) AS TABLE
    SELECT cluster, account, "user", fairshare AS value
    FROM shares
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM shares
        WHERE cluster = cluster_name AND snapshot_time <= now) AND "user" <> '' AND fairshare IS NOT NULL;
