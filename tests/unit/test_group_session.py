"""The session of Ostinato's consumer groups (`kafka/clients.py`): set outright by the environment, heartbeats at a
fifth of it. What the brokers allow is read in the integration tier (every server start asks)."""

from __future__ import annotations

from ostinato.kafka.clients import group_session_config, group_session_timeout_ms


def test_the_environment_sets_the_session_without_asking_the_brokers() -> None:
    # No broker listens on port 9: had it asked, this would have waited and then assumed Kafka's 6000.
    assert group_session_timeout_ms("127.0.0.1:9", {"OSTINATO_SESSION_TIMEOUT_MS": "4500"}) == 4500


def test_heartbeats_come_five_times_a_session_but_never_more_often_than_every_300_ms() -> None:
    assert group_session_config(10_000) == {"session.timeout.ms": 10_000, "heartbeat.interval.ms": 2_000}
    assert group_session_config(1_000) == {"session.timeout.ms": 1_000, "heartbeat.interval.ms": 300}
