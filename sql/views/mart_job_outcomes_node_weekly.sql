-- Weekly ended attempts per node: the union of the days of mart_job_outcomes_node_daily.
CREATE OR REPLACE VIEW mart_job_outcomes_node_weekly AS
SELECT cluster, date_trunc('week', day)::DATE AS week, node, state,
       sum(jobs)::BIGINT AS jobs, sum(gpu_hours) AS gpu_hours
FROM mart_job_outcomes_node_daily GROUP BY ALL;
