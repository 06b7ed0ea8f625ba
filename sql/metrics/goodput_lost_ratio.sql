-- slurmscope_goodput_lost_ratio (gauge): mart_goodput
CREATE OR REPLACE MACRO metric_goodput_lost_ratio(cluster_name, now) AS TABLE
    SELECT cluster, "partition", CAST(nodes AS VARCHAR) AS nodes, k.kind,
           CASE k.kind WHEN 'expected' THEN expected_lost_share ELSE measured_lost_share END AS value
    FROM mart_goodput, (VALUES ('expected'), ('measured')) k(kind) WHERE cluster = cluster_name;
