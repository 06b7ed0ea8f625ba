-- slurmscope_fairshare_usage_share_ratio (gauge): mart_fairshare_drift (latest day <= now)
CREATE OR REPLACE MACRO metric_fairshare_usage_share_ratio(cluster_name, now) AS TABLE
    WITH d AS (SELECT * FROM mart_fairshare_drift WHERE cluster = cluster_name
               AND day = (SELECT max(day) FROM mart_fairshare_drift WHERE cluster = cluster_name
                          AND day <= CAST(now AS DATE)))
    SELECT cluster, account, '7d' AS "window", usage_share_7d AS value FROM d
    UNION ALL SELECT cluster, account, '30d', usage_share_30d FROM d;
