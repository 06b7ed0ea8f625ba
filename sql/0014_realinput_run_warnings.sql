-- A run can succeed with something the operator should know: an empty input file, a snapshot time taken
-- from the file's modification time because its content has none (docs/ingest.md). Kept apart from
-- `error`, which says why a run did not succeed. status also takes 'failed': an ingested file judged
-- garbage by the quarantine threshold (nothing loaded but its quarantined lines).
ALTER TABLE collector_runs ADD COLUMN warning VARCHAR;
