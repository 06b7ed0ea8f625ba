-- Budgets per period, Slurm's allocations and partitions' billing weights (issue 16, items 3 and 4).

-- scontrol show partition --oneliner (collectors/partitions.py): each partition's settings as key/value rows
-- per snapshot. TRESBillingWeights is a partition setting (slurm.conf(5)) that `scontrol show config` never
-- prints; billing.charge_by = "billing_tres" reads it from here when billing.tres_billing_weights is not set.
CREATE TABLE slurm_partitions (
    cluster            VARCHAR NOT NULL,
    snapshot_time      TIMESTAMPTZ NOT NULL,
    "partition"        VARCHAR NOT NULL,
    key                VARCHAR NOT NULL,
    value              VARCHAR,
    PRIMARY KEY (cluster, snapshot_time, "partition", key)
);

-- sshare's GrpTRESRaw: the decayed TRES-minutes of the association and its children that Slurm compares
-- with GrpTRESMins (sshare prints usage_tres_raw / 60, truncated, as acct_policy.c compares it). NULL in
-- snapshots taken before this migration (the live command did not ask for it).
ALTER TABLE shares ADD COLUMN grp_tres_raw VARCHAR;
