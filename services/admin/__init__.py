"""Cluster administration: topics and settings, shard ownership and namespaces records, the history checker, task
queue backlog, and archival wiring."""
