-- slurmscope_fairshare_factor_ratio (gauge): mart_fairshare (latest as_of <= now, account rows)
CREATE OR REPLACE MACRO metric_fairshare_factor_ratio(cluster_name, now) AS TABLE
    SELECT cluster, account, fairshare AS value FROM mart_fairshare
                     WHERE cluster = cluster_name AND source = 'computed' AND "user" = ''
                         AND fairshare IS NOT NULL
                       AND as_of = (SELECT max(as_of) FROM mart_fairshare WHERE cluster = cluster_name
                                    AND source = 'computed' AND as_of <= now);
