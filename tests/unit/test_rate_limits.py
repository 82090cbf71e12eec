"""Rate limits without Kafka: the token bucket both limits use, the split of a queue's limit over the rate limiter's
owners, which held records a batch releases, the core refusing eager dispatch on a rate-limited queue, and the
backlog collector's reading of topic names."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import pytest

from ostinato.schemas.topics import TaskKind, held_topic_name, held_topic_pattern, queue_of_held_topic
from ostinato.services.admin.backlog import Source, age_seconds, sources
from ostinato.services.ratelimit.forwarder import take_released
from ostinato.streams.config import Config
from ostinato.streams.engine import InMemoryEngine
from ostinato.streams.rate import TokenBucket, share
from ostinato.streams.versioning import unversioned_queue, versioned_queue
from tests.unit.core.test_eager_activities import schedule, started
from tests.unit.core.test_engine import Q, activity_task, assert_replays, body


def test_a_bucket_releases_its_rate_over_time_and_no_more() -> None:
    bucket = TokenBucket.per_second(10, now=0.0)
    taken = sum(bucket.take(t / 1000) for t in range(0, 10_000))  # asking every millisecond for 10 s
    assert 100 <= taken <= 101  # 10/s for 10 s, plus the one token it starts with


def test_a_bucket_idle_for_long_bursts_only_a_tenth_of_a_second() -> None:
    bucket = TokenBucket.per_second(100, now=0.0)
    assert bucket.available(3600.0) == 10
    assert bucket.take(3600.0, 10) and not bucket.take(3600.0)
    assert bucket.wait(3600.0) == pytest.approx(0.01)


def test_a_slow_bucket_holds_one_token() -> None:
    bucket = TokenBucket.per_second(0.5, now=0.0)
    assert bucket.take(0.0) and not bucket.take(1.0)
    assert bucket.wait(1.0) == pytest.approx(1.0)
    assert bucket.take(2.0)


def test_a_new_rate_keeps_the_tokens_earned_up_to_the_new_burst() -> None:
    bucket = TokenBucket.per_second(100, now=0.0)
    bucket.set_rate(5, now=0.0)
    assert bucket.available(0.0) == 1 and bucket.rate == 5


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError):
        TokenBucket.per_second(0, now=0.0)


def test_the_owners_shares_add_up_to_the_limit() -> None:
    assert share(12, 1, 1) == 12
    assert share(12, 1, 4) + share(12, 3, 4) == 12
    assert share(12, 0, 4) == 0 and share(12, 1, 0) == 0 and share(0, 1, 1) == 0


@dataclass
class Held:
    """A held record as the release sees it."""

    t: str
    p: int
    o: int

    def topic(self) -> str:
        return self.t

    def partition(self) -> int:
        return self.p


def test_waiting_tasks_go_in_order_per_partition_while_their_queue_has_tokens() -> None:
    a, b = held_topic_name("p", "a"), held_topic_name("p", "b")
    waiting = {(a, 0): deque([Held(a, 0, 10), Held(a, 0, 11), Held(a, 0, 12)]), (b, 0): deque([Held(b, 0, 5)]),
               (a, 1): deque([Held(a, 1, 3)])}
    tokens = {"a": 2, "b": 5}

    def allow(queue: str) -> bool:
        tokens[queue] -= 1
        return tokens[queue] >= 0

    released = take_released(waiting, allow, lambda t: queue_of_held_topic("p", t))
    assert [(m.t, m.p, m.o) for m in released] == [(a, 0, 10), (a, 0, 11), (b, 0, 5)]
    # what had no token waits, in order, for the next round
    assert [m.o for m in waiting[(a, 0)]] == [12] and [m.o for m in waiting[(a, 1)]] == [3] and not waiting[(b, 0)]


def test_held_topic_names_round_trip_and_never_look_like_task_topics() -> None:
    name = held_topic_name("ostinato", "pay.ments-1")
    assert name == "ostinato.held.pay.ments-1.activity"
    assert queue_of_held_topic("ostinato", name) == "pay.ments-1"
    assert queue_of_held_topic("ostinato", "ostinato.tasks.q.activity") is None
    assert queue_of_held_topic("other", name) is None
    assert held_topic_pattern("os.t") == "^os\\.t\\.held\\..+\\.activity$"


def test_the_collector_finds_each_queue_s_topics_and_their_groups() -> None:
    found = sources(["p.tasks.q.workflow", "p.tasks.q.activity", "p.held.q.activity", "p.commands",
                     "p.tasks.a.b.activity", "x.tasks.q.activity"], "p")
    assert found == [Source("q", TaskKind.WORKFLOW, "p.tasks.q.workflow", "p-worker-q"),
                     Source("q", TaskKind.ACTIVITY, "p.tasks.q.activity", "p-worker-q"),
                     Source("q", TaskKind.ACTIVITY, "p.held.q.activity", "p-rate-limiter"),
                     Source("a.b", TaskKind.ACTIVITY, "p.tasks.a.b.activity", "p-worker-a.b")]


def test_age_is_zero_when_nothing_waits() -> None:
    assert age_seconds(None, 5_000) == 0.0
    assert age_seconds(2_000, 5_000) == 3.0


def test_a_rate_limited_queue_gets_no_eager_activities() -> None:
    """Eager dispatch would start the attempt for the completing worker without passing the queue's limiter: on a
    rate-limited queue the activity goes to the (held) activity topic like any other."""
    engine = InMemoryEngine(shards=2, config=Config(rate_limited_queues=frozenset({Q})))
    task = started(engine, "limited-1")
    reply = engine.complete_workflow_task(task, [schedule("a", True), schedule("b", True)], identity="w1")
    assert body(reply)[0] == "Accepted" and reply["activity_tasks"] == []  # type: ignore[index]
    assert [activity_task(engine)["activity_id"] for _ in range(2)] == ["a", "b"]
    assert_replays(engine)


def test_a_queue_s_limit_holds_its_builds_tasks_too() -> None:
    """Worker versioning routes a pinned run's activities to `q.build-A`: the limit of `q` must still hold them."""
    assert unversioned_queue(versioned_queue("orders", "2026-06-01")) == "orders"
    assert unversioned_queue("orders") == "orders"
    held = held_topic_name("p", versioned_queue("orders", "A"))
    assert queue_of_held_topic("p", held) == "orders.build-A"


def test_a_queue_s_builds_share_one_bucket() -> None:
    """Two builds draining at once (`q.build-A`, `q.build-B`) release the queue's rate between them, not twice it."""
    from confluent_kafka import TopicPartition

    from ostinato.services.ratelimit.forwarder import RateLimiter

    class OnePartition:
        def partitions(self, topic: str) -> int:
            return 1

    now = [0.0]
    limiter = RateLimiter("unused:9092", "p", OnePartition(), lambda: {"q": 10.0}, "i",  # type: ignore[arg-type]
                          clock=lambda: now[0])
    owned = limiter._owned([TopicPartition(held_topic_name("p", versioned_queue("q", b)), 0) for b in "AB"])
    assert owned == {"q": (2, 2)}
    released = 0
    for tick in range(100):  # ten seconds
        now[0] = tick / 10
        released += sum(limiter._allow(versioned_queue("q", b), now[0], owned) for b in "AB" for _ in range(5))
    assert 95 <= released <= 110, released  # 10/s over 10 s, plus the half-second burst
