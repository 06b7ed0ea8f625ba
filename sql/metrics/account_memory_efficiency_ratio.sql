-- slurmscope_account_memory_efficiency_ratio (gauge): mart_job_cpu_mem_efficiency (end_day in the month of now, <= today)
CREATE OR REPLACE MACRO metric_account_memory_efficiency_ratio(cluster_name, now) AS TABLE
    SELECT cluster, coalesce(account, '') AS account,
           sum(mem_used_bytes) / sum(req_mem_bytes) AS value
    FROM mart_job_cpu_mem_efficiency
    WHERE cluster = cluster_name AND end_day <= CAST(now AS DATE)
      AND end_day >= date_trunc('month', CAST(now AS DATE))
      AND mem_used_bytes IS NOT NULL AND req_mem_bytes IS NOT NULL
    GROUP BY ALL
    HAVING sum(req_mem_bytes) > 0;
