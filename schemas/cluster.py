"""The cluster settings record kept in `<prefix>.cluster` under the key `settings` (Avro, see avro/cluster.avsc)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ostinato.schemas import codec

SETTINGS_KEY = "settings"
SETTINGS_TYPE = "ostinato.cluster.ClusterSettings"


@dataclass(frozen=True)
class ClusterSettings:
    """Fixed at `cluster init`: every process checks its own configuration against these."""

    topic_prefix: str
    shards: int
    replication_factor: int
    reply_partitions: int
    created_at_ms: int
    created_by: str

    def encode(self) -> bytes:
        return codec.encode(SETTINGS_TYPE, asdict(self))

    @classmethod
    def decode(cls, data: bytes) -> ClusterSettings:
        name, record = codec.decode(data)
        if name != SETTINGS_TYPE:
            raise codec.DecodeError(f"expected {SETTINGS_TYPE} under the settings key, found {name}")
        return cls(**record)
