-- slurmscope_fairshare_target_share_ratio (gauge): mart_fairshare_drift (latest day <= now)
CREATE OR REPLACE MACRO metric_fairshare_target_share_ratio(cluster_name, now) AS TABLE
    SELECT cluster, account, target_share AS value FROM mart_fairshare_drift WHERE cluster = cluster_name
                     AND day = (SELECT max(day) FROM mart_fairshare_drift WHERE cluster = cluster_name
                                AND day <= CAST(now AS DATE));
