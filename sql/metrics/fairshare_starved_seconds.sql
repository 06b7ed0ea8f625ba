-- slurmscope_fairshare_starved_seconds (gauge): mart_fairshare_drift (latest day <= now)
CREATE OR REPLACE MACRO metric_fairshare_starved_seconds(cluster_name, now) AS TABLE
    SELECT cluster, account, days_starved * 86400 AS value FROM mart_fairshare_drift
        WHERE cluster = cluster_name
                     AND day = (SELECT max(day) FROM mart_fairshare_drift WHERE cluster = cluster_name
                                AND day <= CAST(now AS DATE));
