-- Fair-share marts (pipelines/fairshare.py). Rebuilt per window by the runner: rows with as_of / day at or
-- after the window start are deleted and recomputed in one transaction.

-- One row per association (account row: user = '') per as_of instant and source.
-- as_of: every local day end (billing.timezone), the last sshare snapshot of each day, and the run's now.
-- source 'computed': recomputed from jobs with Slurm's decay and algorithm; 'sshare': what Slurm reported.
CREATE TABLE mart_fairshare (
    cluster            VARCHAR NOT NULL,
    as_of              TIMESTAMPTZ NOT NULL,
    account            VARCHAR NOT NULL,
    "user"             VARCHAR NOT NULL,     -- '' for the account's own row
    parent             VARCHAR,              -- parent account (for a user: its account); NULL for root
    raw_shares         BIGINT,               -- sshare RawShares; NULL = 'parent'
    norm_shares        DOUBLE,               -- Fair Tree: among siblings; classic: of the whole machine
    raw_usage          DOUBLE,               -- decayed charge (billing TRES-seconds or GPU-seconds)
    effectv_usage      DOUBLE,               -- Fair Tree: raw / parent raw; classic: Slurm's UE
    level_fs           DOUBLE,               -- Fair Tree LevelFS = NormShares / EffectvUsage (inf = no usage)
    fairshare          DOUBLE,               -- FairShare factor (users; accounts too under classic)
    source             VARCHAR NOT NULL,     -- 'computed' | 'sshare'
    PRIMARY KEY (cluster, as_of, account, "user", source)
);

-- One row per account per local day: usage share against target share, and starvation streaks.
CREATE TABLE mart_fairshare_drift (
    cluster            VARCHAR NOT NULL,
    day                DATE NOT NULL,
    account            VARCHAR NOT NULL,
    usage_share_7d     DOUBLE,               -- account usage / cluster usage, trailing 7 days (undecayed)
    usage_share_30d    DOUBLE,
    target_share       DOUBLE,               -- product of normalised shares from root to the account
    ratio              DOUBLE,               -- usage_share_7d / target_share
    state              VARCHAR NOT NULL,     -- 'starved' | 'over_served' | 'ok'
    starved_since      DATE,
    over_served_since  DATE,
    days_starved       INTEGER NOT NULL,
    days_over_served   INTEGER NOT NULL,
    PRIMARY KEY (cluster, day, account)
);
