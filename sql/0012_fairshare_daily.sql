-- Fair-share day table (pipelines/fairshare.py): the pipeline's own state, and a mart in its own right.
-- One row per association and local day (billing.timezone) on which it was charged anything.
-- Decayed usage depends on the whole history; with these day sums an incremental run reads only the
-- attempts that overlap its window and carries the stored days forward (docs/pipelines.md). Rebuilt by
-- the runner like the other marts: rows with day >= the window's first day are deleted and recomputed.
-- charge depends on the decay half-life and fairshare.charge in force when the day was computed: after
-- changing PriorityDecayHalfLife, fairshare.charge or billing.timezone, run `pipelines run --full`.
CREATE TABLE mart_fairshare_daily (
    cluster            VARCHAR NOT NULL,
    day                DATE NOT NULL,
    account            VARCHAR NOT NULL,     -- '' when the record had none
    "user"             VARCHAR NOT NULL,
    charge             DOUBLE NOT NULL,      -- that day's charge, decayed to the day's end (local midnight)
    raw                DOUBLE NOT NULL       -- the same undecayed (billing TRES-seconds or GPU-seconds)
);
-- Unique key (cluster, day, account, "user"), kept by the runner's delete-then-insert (no index, as for
-- every mart).

-- Attempts with a Start per association, local start day and local submit day: drift's demand counts an
-- attempt on its submit day once it has started, however long it was pending. Keyed by start day, a stored
-- row is complete once its day is (as for the charges above); an incremental run adds the counts of the
-- attempts started from its window on. Rebuilt by the runner from `day` (the start day) on.
CREATE TABLE mart_fairshare_submits (
    cluster            VARCHAR NOT NULL,
    day                DATE NOT NULL,        -- local start day
    submit_day         DATE NOT NULL,        -- local submit day
    account            VARCHAR NOT NULL,     -- '' when the record had none
    "user"             VARCHAR NOT NULL,
    submitted          BIGINT NOT NULL       -- attempts (those without account or user count 0: drift skips them)
);
-- Unique key (cluster, day, submit_day, account, "user").
