-- gpu_jobs: a job can hold two MIG instances of one GPU from the same start time, so the MIG instance
-- belongs in the natural key. mig_instance becomes NOT NULL ('' for a whole GPU); columns are unchanged.
CREATE TABLE gpu_jobs_new (
    cluster            VARCHAR NOT NULL,
    node               VARCHAR NOT NULL,
    gpu_uuid           VARCHAR NOT NULL,
    job_id             VARCHAR NOT NULL,
    interval_start     TIMESTAMPTZ NOT NULL,
    interval_end       TIMESTAMPTZ,
    gpu_index          INTEGER,
    mig_instance       VARCHAR NOT NULL DEFAULT '',  -- MIG device UUID, '' for a whole GPU
    source             VARCHAR,                      -- 'prolog' | 'cgroup'
    PRIMARY KEY (cluster, node, gpu_uuid, job_id, mig_instance, interval_start)
);
INSERT INTO gpu_jobs_new
SELECT cluster, node, gpu_uuid, job_id, interval_start, interval_end, gpu_index, coalesce(mig_instance, ''), source
FROM gpu_jobs;
DROP TABLE gpu_jobs;
ALTER TABLE gpu_jobs_new RENAME TO gpu_jobs;
