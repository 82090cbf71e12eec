"""Real Kafka (and later OpenSearch and S3) started locally from Maven Central jars, without Docker."""

from ostinato.infra.errors import InfraError

__all__ = ["InfraError"]
