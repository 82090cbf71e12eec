"""The wire contract: Avro schemas, the topic catalogue, the partitioner and the codec."""

from ostinato.schemas.keys import shard_for
from ostinato.schemas.partitioner import murmur2, partition_for

__all__ = ["murmur2", "partition_for", "shard_for"]
