-- Aggregated sinfo captures: sinfo without --Node and without node names prints one line per group of
-- nodes that share the printed fields (`sinfo --Format=Nodes: ,StateLong: ,Gres: ,GresUsed:`,
-- `sinfo -o '%R|%D|%T|%b'`). Such recorded files carry state and GRES but cannot be keyed per node, so
-- they land here, one row per printed line. The live collector is node-oriented (node_states).
CREATE TABLE node_groups (
    cluster             VARCHAR NOT NULL,
    snapshot_time       TIMESTAMPTZ NOT NULL,
    group_no            INTEGER NOT NULL,     -- line number in the capture (order as Slurm printed it)
    "partition"         VARCHAR,              -- '' when the format has no partition column
    node_count          INTEGER,
    state               VARCHAR,
    state_flags         VARCHAR,
    state_raw           VARCHAR,
    gres                VARCHAR,              -- per node, as printed
    gres_used           VARCHAR,              -- per node, as printed
    gpus_per_node       INTEGER,              -- MIG slices excluded
    gpus_used_per_node  INTEGER,
    gpu_type            VARCHAR,
    features            VARCHAR,
    source              VARCHAR,
    PRIMARY KEY (cluster, snapshot_time, group_no)
);
