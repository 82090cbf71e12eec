"""Real Kafka (KRaft, one or three nodes), OpenSearch and an S3 server (s3proxy), fetched from Maven Central and
started locally on loopback, without Docker."""

from ostinato.infra.errors import InfraError

__all__ = ["InfraError"]
