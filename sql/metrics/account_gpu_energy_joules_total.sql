-- slurmscope_account_gpu_energy_joules_total (counter): mart_cost_efficiency_daily (days <= today)
CREATE OR REPLACE MACRO metric_account_gpu_energy_joules_total(cluster_name, now) AS TABLE
    SELECT cluster, account, sum(energy_joules) AS value
    FROM mart_cost_efficiency_daily
    WHERE cluster = cluster_name AND day <= CAST(now AS DATE)
    GROUP BY ALL;
