-- slurmscope_account_cpu_efficiency_ratio (gauge): mart_job_cpu_mem_efficiency (end_day in the month of now, <= today)
CREATE OR REPLACE MACRO metric_account_cpu_efficiency_ratio(cluster_name, now) AS TABLE
    SELECT cluster, coalesce(account, '') AS account,
           sum(cpu_used_seconds) / sum(core_walltime_seconds) AS value
    FROM mart_job_cpu_mem_efficiency
    WHERE cluster = cluster_name AND end_day <= CAST(now AS DATE)
      AND end_day >= date_trunc('month', CAST(now AS DATE)) AND cpu_used_seconds IS NOT NULL
    GROUP BY ALL
    HAVING sum(core_walltime_seconds) > 0;
