-- slurmscope_fairshare_shares_ratio (gauge): shares (latest sshare, account rows)
CREATE OR REPLACE MACRO metric_fairshare_shares_ratio(cluster_name, now) AS TABLE
    SELECT cluster, account, norm_shares AS value
    FROM shares
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM shares
        WHERE cluster = cluster_name AND snapshot_time <= now) AND "user" = '' AND norm_shares IS NOT NULL;
