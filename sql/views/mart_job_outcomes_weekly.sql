-- Weeks (Monday-start, billing-zone days) are unions of days, so the weekly outcomes are views, never stale.
CREATE OR REPLACE VIEW mart_job_outcomes_weekly AS
SELECT cluster, date_trunc('week', day)::DATE AS week, "partition", account, state, failure,
       sum(jobs)::BIGINT AS jobs, sum(gpu_hours) AS gpu_hours
FROM mart_job_outcomes_daily GROUP BY ALL;
