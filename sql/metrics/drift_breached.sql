-- slurmscope_drift_breached (gauge): mart_drift (latest as_of <= now per signal and entity)
CREATE OR REPLACE MACRO metric_drift_breached(cluster_name, now) AS TABLE
    SELECT cluster, signal, entity_type, entity, coalesce(node, '') AS node,
                            CASE WHEN breached THEN 1 ELSE 0 END AS value
                     FROM mart_drift WHERE cluster = cluster_name AND as_of <= now
                     QUALIFY row_number() OVER (PARTITION BY signal, entity ORDER BY as_of DESC) = 1;
