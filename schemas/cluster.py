"""The cluster settings record kept in `<prefix>.cluster` under the key `settings`.

Encoded as JSON until the wire-contract issue gives every record an Avro schema; readers must accept
unknown fields so that change stays compatible.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

SETTINGS_KEY = "settings"


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
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> ClusterSettings:
        raw = json.loads(data)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})
