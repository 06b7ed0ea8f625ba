-- slurmscope_node_events_total (counter): node_events
-- Every node sinfo has seen gets both series from 0, so that the first event is an increase too.
CREATE OR REPLACE MACRO metric_node_events_total(cluster_name, now) AS TABLE
    WITH nodes AS (SELECT DISTINCT node FROM node_states WHERE cluster = cluster_name AND snapshot_time <= now
                   UNION SELECT DISTINCT node FROM node_events WHERE cluster = cluster_name AND node <> ''
                   AND time_start <= now),
    ev AS (SELECT node, CASE WHEN upper(coalesce(state, '')) LIKE '%DOWN%' THEN 'down' ELSE 'drain' END
                  AS state, count(*) AS n
           FROM node_events WHERE cluster = cluster_name AND node <> '' AND time_start <= now GROUP BY ALL)
    SELECT cluster_name AS cluster, nodes.node, s.state, coalesce(ev.n, 0) AS value
    FROM nodes CROSS JOIN (VALUES ('down'), ('drain')) s(state)
    LEFT JOIN ev ON ev.node = nodes.node AND ev.state = s.state;
