-- slurmscope_goodput_ratio (gauge): mart_goodput
CREATE OR REPLACE MACRO metric_goodput_ratio(cluster_name, now) AS TABLE
    SELECT cluster, "partition", CAST(nodes AS VARCHAR) AS nodes, k.kind,
           CASE k.kind WHEN 'expected' THEN expected_goodput ELSE measured_goodput END AS value
    FROM mart_goodput, (VALUES ('expected'), ('measured')) k(kind) WHERE cluster = cluster_name;
