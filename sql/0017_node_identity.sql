-- A node is its NodeName, never its host name (issue 14). slurm.conf lets nodes share a NodeHostname
-- (several slurmd per host, aliased and cloud nodes), and the live sinfo command asked for NodeHost, so
-- nodes that share a host were stored as one row per host. From this version the live command asks for
-- NodeList (`--Node`: one node name per line) and keeps the host name here.
-- Rows stored before this migration keep their `node` as stored: on a cluster whose nodes each have their
-- own host name (slurm.conf's default, NodeHostname = NodeName) it is the node name; where hosts were
-- shared, the nodes behind one host were already merged and cannot be split again. Their node_host stays
-- NULL (not recorded).
ALTER TABLE node_states ADD COLUMN node_host VARCHAR;
