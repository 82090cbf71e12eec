"""The topic catalogue says what DESIGN.md §3 says."""

from __future__ import annotations

import pytest

from ostinato.schemas.topics import (
    DEFAULT_TASK_QUEUE_PARTITIONS,
    TaskKind,
    Topic,
    catalogue,
    min_insync_replicas,
    task_topic_spec,
)


def test_partitions_and_cleanup_per_topic() -> None:
    specs = {s.name: s for s in catalogue("acme", shards=16, replication_factor=3, reply_partitions=5)}
    expected = {
        "acme.commands": (16, "delete"), "acme.history": (16, "compact"), "acme.state": (16, "compact"),
        "acme.visibility": (16, "compact"), "acme.replies": (5, "delete"), "acme.cluster": (1, "compact"),
        "acme.schemas": (1, "compact"),
    }
    assert {n: (s.partitions, s.configs["cleanup.policy"]) for n, s in specs.items()} == expected
    assert len(specs) == len(Topic)
    assert specs["acme.commands"].configs["retention.ms"] == str(7 * 24 * 3600 * 1000)
    assert int(specs["acme.replies"].configs["retention.ms"]) <= 24 * 3600 * 1000  # short-lived answers
    assert {s.configs["min.insync.replicas"] for s in specs.values()} == {"2"}


@pytest.mark.parametrize(("rf", "isr"), [(1, 1), (2, 1), (3, 2), (5, 2)])
def test_min_insync_replicas(rf: int, isr: int) -> None:
    assert min_insync_replicas(rf) == isr


def test_task_topics() -> None:
    spec = task_topic_spec("acme", "orders", TaskKind.ACTIVITY, replication_factor=1)
    assert spec.name == "acme.tasks.orders.activity"
    assert spec.partitions == DEFAULT_TASK_QUEUE_PARTITIONS
    assert spec.configs["cleanup.policy"] == "delete"


def test_zero_shards_is_refused() -> None:
    with pytest.raises(ValueError, match="shards must be at least 1"):
        catalogue("acme", shards=0, replication_factor=1)
