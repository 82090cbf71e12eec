"""Configuration shared by every confluent-kafka client the services create."""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from ostinato.schemas.topics import MAX_RECORD_BYTES

# librdkafka's own log lines (retries, reconnects) go here; silent unless the application configures logging.
log = logging.getLogger("ostinato.kafka")
log.addHandler(logging.NullHandler())


class KafkaUnavailable(RuntimeError):
    """The bootstrap servers did not answer in time."""


def base_config(bootstrap: str, client_id: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "client.id": client_id, "logger": log}


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient(base_config(bootstrap, "ostinato-admin"))


def idempotent_producer(bootstrap: str, client_id: str) -> Producer:
    return Producer({
        **base_config(bootstrap, client_id),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 0,
        "message.max.bytes": MAX_RECORD_BYTES,
    })


def reader(bootstrap: str, client_id: str, isolation: str = "read_committed",
           overrides: dict[str, Any] | None = None) -> Consumer:
    """A consumer for manual assignment only (no group membership, no commits); `overrides` are further
    librdkafka settings."""
    return Consumer({
        **base_config(bootstrap, client_id),
        "group.id": f"{client_id}-unused",
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "enable.partition.eof": True,
        "fetch.max.bytes": MAX_RECORD_BYTES * 2,
        **(overrides or {}),
    })


def wait_for_brokers(admin: AdminClient, bootstrap: str, timeout: float) -> int:
    """Number of brokers, or a clear error when none answers within `timeout` seconds."""
    try:
        return len(admin.list_topics(timeout=timeout).brokers)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        detail = err.str() if isinstance(err, KafkaError) else str(exc)
        raise KafkaUnavailable(
            f"cannot reach Kafka at {bootstrap} within {timeout:.0f}s ({detail}). Is a broker running there? "
            "`ostinato dev` starts one; OSTINATO_KAFKA or --kafka points elsewhere."
        ) from None
