"""The history processor: the exactly-once Kafka loop around the core, the shard overlay, the RocksDB stores and
their restore from the changelog topics, and the commit notifications that wake readers (DESIGN.md §4, §5)."""
