"""One owned shard without Kafka: commands and deadlines in, changelog writes and output records out, a batch at a
time; and the same scripted workflows through the in-memory engine and through Kafka shards, compared."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ostinato.schemas import codec, partition_for
from ostinato.schemas.keys import history_key, run_key, workflow_key
from ostinato.schemas.topics import Topic
from ostinato.services.history import shard as shard_module
from ostinato.services.history.changelog import parse_timer_key, timer_key
from ostinato.services.history.shard import Shard
from ostinato.services.history.store import CHECKPOINT_STATE, Family, MemoryStore, pack_int, unpack_int
from ostinato.streams import events as ev
from ostinato.streams.actions import Deadline
from ostinato.streams.config import DAY_MS, Config
from ostinato.streams.engine import InMemoryEngine
from ostinato.streams.model import decode_current, decode_run
from tests.unit.shard_support import (
    NOW,
    NS,
    PREFIX,
    TASK_PARTITIONS,
    Q,
    ShardEngine,
    command,
    commit,
    complete_command,
    decoded,
    event_types,
    family,
    payload,
    rebuilt_from_changelog,
    replies,
    signal_command,
    snapshot,
    start_command,
    task_of,
    topology,
    workflow_on,
    workflow_tasks,
)

S, HOME = 3, 1
WF, OTHER = workflow_on(HOME, S, "order"), workflow_on(HOME, S, "order", skip=1)
FOREIGN = workflow_on(0, S, "order")
CONFIG = Config()
TIMER = ("StartTimerCommand", {"timer_id": "nap", "start_to_fire_timeout_ms": 5_000})
COMPLETE = ("CompleteWorkflowExecutionCommand", {"result": []})


@pytest.fixture
def shard() -> Shard:
    return Shard(HOME, MemoryStore(), topology(S), CONFIG)


def started(shard: Shard, workflow_id: str = WF, offset: int = 0, now: int = NOW) -> dict[str, Any]:
    """Start a run in its own committed batch; its first workflow task."""
    shard.process(start_command(workflow_id, f"start-{workflow_id}"), offset, now)
    [task] = workflow_tasks(commit(shard))
    return task


def run_state(shard: Shard, workflow_id: str, run_id: str) -> Any:
    data = shard.get(Family.STATE, run_key(NS, workflow_id, run_id).encode())
    return None if data is None else decode_run(data)


def kinds(keys: Any) -> list[tuple[str, int]]:
    return [(d.kind, d.fire_at_ms) for _, _, d in map(parse_timer_key, keys)]


# -- commands --------------------------------------------------------------------------------------------------------

def test_a_start_writes_history_state_visibility_a_task_and_a_reply(shard: Shard) -> None:
    shard.process(start_command(WF, "s-1"), 42, NOW)
    out = shard.outputs
    assert shard.rejections == [] and shard.commands == 1
    [(name, body)] = replies(out)
    run_id = body["run_id"]
    assert (name, body["started"]) == ("WorkflowStarted", True)
    assert [(o.partition, o.key) for o in out if o.topic == f"{PREFIX}.replies"] == [(0, b"s-1")]

    history = decoded(out, Topic.HISTORY)
    assert [(p, k) for p, k, _ in history] == [(HOME, history_key(NS, WF, run_id, i).encode()) for i in (1, 2)]
    # no STARTED at dispatch: it is written with the worker's answer
    assert event_types(out) == [ev.WORKFLOW_EXECUTION_STARTED, ev.WORKFLOW_TASK_SCHEDULED]
    assert {v["event_time_ms"] for _, _, v in history if v} == {NOW}
    topics = [o.topic.removeprefix(PREFIX + ".") for o in out]
    assert topics[:4] == ["history"] * 2 + ["state"] * 2  # the step's records first, then its actions

    state = {k: v for _, k, v in decoded(out, Topic.STATE)}
    assert {p for p, _, _ in decoded(out, Topic.STATE)} == {HOME}
    assert state[run_key(NS, WF, run_id).encode()]["status"] == "RUNNING"
    assert state[workflow_key(NS, WF).encode()]["run_id"] == run_id

    [(partition, key, visibility)] = decoded(out, Topic.VISIBILITY)
    assert (partition, key) == (HOME, run_key(NS, WF, run_id).encode())
    assert visibility is not None and visibility["status"] == "RUNNING" and visibility["history_length"] == 2
    assert visibility["history_size_bytes"] == sum(len(o.value or b"") for o in out if o.topic == f"{PREFIX}.history")

    [(partition, key, task)] = decoded(out, f"{PREFIX}.tasks.{Q}.workflow")
    assert (partition, key) == (partition_for(workflow_key(NS, WF), TASK_PARTITIONS), workflow_key(NS, WF).encode())
    assert task is not None and (task["run_id"], task["attempt"], task["history_length"]) == (run_id, 1, 3)
    # history's events, then the STARTED the task carries (not in history) under the id reserved for it
    assert [e["event_type"] for e in task["events"]] == [*event_types(out), ev.WORKFLOW_TASK_STARTED]
    assert [e["event_id"] for e in task["events"]] == [1, 2, 3]
    assert (task["scheduled_event_id"], task["started_event_id"], task["previous_started_event_id"]) == (2, 3, 0)
    assert task["events"][-1]["event_time_ms"] == NOW

    assert family(shard.store, Family.STATE) == {}  # nothing reaches the store before the commit
    history_values = {o.key: o.value for o in out if o.topic == f"{PREFIX}.history"}
    shard.committed({CHECKPOINT_STATE: pack_int(7)})
    assert family(shard.store, Family.HISTORY) == history_values
    size = shard.store.get(Family.SIZES, run_key(NS, WF, run_id).encode())
    assert unpack_int(size) == visibility["history_size_bytes"]
    assert kinds(family(shard.store, Family.TIMERS)) == [("WORKFLOW_TASK_TIMEOUT", NOW + 10_000)]
    assert unpack_int(shard.store.get(Family.META, CHECKPOINT_STATE)) == 7
    assert shard.outputs == [] and shard.rejections == [] and shard.commands == 0


def test_completing_the_task_closes_the_run(shard: Shard) -> None:
    task = started(shard)
    shard.process(complete_command(task, COMPLETE), 1, NOW + 500)
    out = commit(shard)
    assert event_types(out) == [ev.WORKFLOW_TASK_STARTED, ev.WORKFLOW_TASK_COMPLETED, ev.WORKFLOW_EXECUTION_COMPLETED]
    assert [v["event_id"] for _, _, v in decoded(out, Topic.HISTORY) if v] == [3, 4, 5]
    # no start reported: the STARTED has the time the task showed, its dispatch
    assert [v["event_time_ms"] for _, _, v in decoded(out, Topic.HISTORY) if v] == [NOW, NOW + 500, NOW + 500]
    assert replies(out) == [("Accepted", {"run_id": task["run_id"], "cancel_requested": False})]
    [(_, _, visibility)] = decoded(out, Topic.VISIBILITY)
    assert visibility is not None and (visibility["status"], visibility["close_time_ms"]) == ("COMPLETED", NOW + 500)
    pointer = shard.store.get(Family.STATE, workflow_key(NS, WF).encode())
    assert pointer is not None and decode_current(pointer).status == "COMPLETED"
    assert kinds(family(shard.store, Family.TIMERS)) == [("RETENTION", NOW + 500 + CONFIG.retention_ms)]
    assert workflow_tasks(out) == []


def test_unreadable_records_are_malformed_and_the_shard_goes_on(shard: Shard) -> None:
    accepted = ("ostinato.reply.Accepted", {"run_id": "", "cancel_requested": False})
    reply = codec.encode("ostinato.reply.Reply", {"request_id": "r", "namespace": NS, "workflow_id": WF,
                                                  "body": accepted})
    for offset, data in enumerate([b"garbage", None, b"", reply]):
        shard.process(data, offset, NOW)
    shard.process(start_command(WF), 4, NOW)
    assert [(r.code, r.command) for r in shard.rejections] == [("MALFORMED", None)] * 4
    assert "offset 3" in shard.rejections[3].message and "ostinato.reply.Reply" in shard.rejections[3].message
    assert shard.commands == 5
    assert replies(shard.outputs)[0][0] == "WorkflowStarted"
    assert len(workflow_tasks(commit(shard))) == 1


@pytest.mark.parametrize("reply_partition", [
    2,
    None,
])
def test_a_command_for_another_shard_is_refused(shard: Shard, reply_partition: int | None) -> None:
    shard.process(command("StartWorkflowExecution", {"workflow_type": "Order", "task_queue": Q}, workflow_id=FOREIGN,
                          request_id="lost", reply_partition=reply_partition), 0, NOW)
    [rejection] = shard.rejections
    assert rejection.code == "WRONG_SHARD" and rejection.command is not None and f"not {HOME}" in rejection.message
    if reply_partition is None:
        assert shard.outputs == []
    else:
        [(partition, key, reply)] = decoded(shard.outputs, Topic.REPLIES)
        assert (partition, key) == (2, b"lost") and reply is not None
        assert reply["body"][0] == "ostinato.reply.Rejected" and reply["body"][1]["code"] == "WRONG_SHARD"
    assert all(items == {} for items in shard.writes.values())


def test_a_stale_task_token_is_rejected(shard: Shard) -> None:
    task = started(shard)
    shard.process(complete_command({**task, "attempt": 2}, COMPLETE), 1, NOW)
    assert [r.code for r in shard.rejections] == ["STALE_TASK"]
    assert [(name, body["code"]) for name, body in replies(shard.outputs)] == [("Rejected", "STALE_TASK")]
    assert event_types(shard.outputs) == [] and all(items == {} for items in shard.writes.values())

    shard.process(complete_command(task, COMPLETE), 2, NOW)
    shard.process(complete_command(task, COMPLETE), 3, NOW)  # a duplicate of an answer already taken
    assert [r.code for r in shard.rejections] == ["STALE_TASK", "STALE_TASK"]
    assert event_types(shard.outputs) == [ev.WORKFLOW_TASK_STARTED, ev.WORKFLOW_TASK_COMPLETED,
                                          ev.WORKFLOW_EXECUTION_COMPLETED]


@pytest.mark.parametrize("reply_partition", [4, 99, -1])
def test_a_reply_to_a_partition_that_does_not_exist_is_dropped(shard: Shard, reply_partition: int) -> None:
    shard.process(command("StartWorkflowExecution", {"workflow_type": "Order", "task_queue": Q}, workflow_id=WF,
                          reply_partition=reply_partition), 0, NOW)
    assert [(r.code, r.command) for r in shard.rejections] == [("INVALID_ARGUMENT", None)]
    assert str(reply_partition) in shard.rejections[0].message
    assert replies(shard.outputs) == []
    assert len(event_types(shard.outputs)) == 2 and len(workflow_tasks(shard.outputs)) == 1  # the start itself stands


def test_an_abort_then_the_same_commands_give_byte_identical_outputs(shard: Shard) -> None:
    started(shard, OTHER)
    before = {f: family(shard.store, f) for f in Family}
    batch = [start_command(WF, "s-1"), signal_command(WF, "go"), signal_command(OTHER, "go"), start_command(WF, "s-2")]

    def run_batch() -> tuple[list[Any], list[str]]:
        for offset, data in enumerate(batch, start=10):
            shard.process(data, offset, NOW)
        return list(shard.outputs), [r.code for r in shard.rejections]

    first, codes = run_batch()
    assert codes == ["ALREADY_STARTED"]  # "s-2": the run "s-1" started is running
    shard.reset()
    assert shard.outputs == [] and shard.rejections == [] and all(items == {} for items in shard.writes.values())
    assert {f: family(shard.store, f) for f in Family} == before
    assert shard.get(Family.STATE, workflow_key(NS, WF).encode()) is None
    assert shard.due_timers(NOW + DAY_MS, 10) == list(before[Family.TIMERS])
    assert run_batch() == (first, codes)  # the same run id too: it derives from the command's offset

    elsewhere = Shard(HOME, MemoryStore(), topology(S), CONFIG)
    elsewhere.process(batch[0], 11, NOW)  # one offset later: another run id
    assert replies(elsewhere.outputs)[0][1]["run_id"] != replies(first)[0][1]["run_id"]


def test_a_batch_equals_one_commit_per_command(shard: Shard) -> None:
    one_by_one = Shard(HOME, MemoryStore(), topology(S), CONFIG)
    batch = [start_command(WF, "s-1"), signal_command(WF, "a"), start_command(OTHER, "s-2"), signal_command(WF, "b"),
             signal_command(OTHER, "c"), signal_command(WF, "d")]
    apart: list[Any] = []
    for offset, data in enumerate(batch):
        shard.process(data, offset, NOW + offset)
        one_by_one.process(data, offset, NOW + offset)
        apart += commit(one_by_one)
    together = commit(shard)
    assert together == apart
    assert {f: family(shard.store, f) for f in Family} == {f: family(one_by_one.store, f) for f in Family}


# -- timers ----------------------------------------------------------------------------------------------------------

def test_a_timer_is_indexed_fires_once_when_due_and_leaves_the_index(shard: Shard) -> None:
    task = started(shard)
    shard.process(complete_command(task, TIMER), 1, NOW)
    assert shard.next_timer_ms() == NOW + 5_000  # already from the overlay
    commit(shard)
    [key] = family(shard.store, Family.TIMERS)
    assert kinds([key]) == [("USER_TIMER", NOW + 5_000)]
    assert shard.next_timer_ms() == NOW + 5_000
    assert shard.due_timers(NOW + 4_999, 10) == []
    assert shard.due_timers(NOW + 5_000, 10) == [key]

    shard.fire(key, 2, NOW + 5_003)
    assert event_types(shard.outputs) == [ev.TIMER_FIRED, ev.WORKFLOW_TASK_SCHEDULED]
    assert decoded(shard.outputs, Topic.HISTORY)[0][2]["event_time_ms"] == NOW + 5_003  # type: ignore[index]
    assert len(workflow_tasks(shard.outputs)) == 1 and shard.timers_fired == [3] and shard.rejections == []
    assert shard.due_timers(NOW + 5_003, 10) == []  # fired: out of the index within the batch already
    commit(shard)
    assert kinds(family(shard.store, Family.TIMERS)) == [("WORKFLOW_TASK_TIMEOUT", NOW + 15_003)]

    shard.fire(key, 2, NOW + 6_000)  # the same deadline again (a stale index entry): nothing happens
    assert shard.outputs == [] and shard.rejections == []
    commit(shard)
    assert kinds(family(shard.store, Family.TIMERS)) == [("WORKFLOW_TASK_TIMEOUT", NOW + 15_003)]


def test_a_stale_timer_key_does_nothing_but_leaves_the_index(shard: Shard) -> None:
    task = started(shard)
    ghosts = [timer_key(NS, WF, Deadline(NOW, "USER_TIMER", task["run_id"], "ghost")),
              timer_key(NS, OTHER, Deadline(NOW - 1, "WORKFLOW_TASK_TIMEOUT", "no-such-run", "", 2, 1))]
    assert shard.due_timers(NOW, 10) == []  # the index is read before the ghosts come
    shard.writes[Family.TIMERS].update(dict.fromkeys(ghosts, b""))
    commit(shard)  # committed as a batch would: the store, then the index
    assert shard.due_timers(NOW, 10) == sorted(ghosts)
    for key in shard.due_timers(NOW, 10):
        shard.fire(key, 1, NOW)
    assert shard.outputs == [] and shard.rejections == []
    commit(shard)
    assert kinds(family(shard.store, Family.TIMERS)) == [("WORKFLOW_TASK_TIMEOUT", NOW + 10_000)]
    assert run_state(shard, WF, task["run_id"]).history_length == 2


def test_due_timers_read_through_the_batch_and_keep_the_limit(shard: Shard) -> None:
    started(shard, OTHER, now=NOW - 5)  # committed: task timeout at NOW + 9_995
    shard.process(start_command(WF), 1, NOW)  # in the batch only: task timeout at NOW + 10_000
    assert kinds(shard.due_timers(NOW + 10_000, 10)) == [("WORKFLOW_TASK_TIMEOUT", NOW + 9_995),
                                                        ("WORKFLOW_TASK_TIMEOUT", NOW + 10_000)]
    assert kinds(shard.due_timers(NOW + 10_000, 1)) == [("WORKFLOW_TASK_TIMEOUT", NOW + 9_995)]
    assert shard.next_timer_ms() == NOW + 9_995

    [task] = [t for t in workflow_tasks(shard.outputs) if t["workflow_id"] == WF]
    shard.process(complete_command(task, TIMER), 2, NOW)  # WF's task timeout goes, its timer comes, in the batch
    assert kinds(shard.due_timers(NOW + 10_000, 10)) == [("USER_TIMER", NOW + 5_000),
                                                        ("WORKFLOW_TASK_TIMEOUT", NOW + 9_995)]
    assert shard.next_timer_ms() == NOW + 5_000
    # The first deadline a batch stopping at deadlines waits for: later than the ones it fires itself.
    assert shard.next_timer_ms(after_ms=NOW + 5_000) == NOW + 9_995
    assert shard.next_timer_ms(after_ms=NOW + 9_995) is None  # WF's task timeout went with its completion
    assert shard.next_timer_ms(after_ms=NOW + 4_999) == NOW + 5_000


# -- failures of one command -----------------------------------------------------------------------------------------

def test_a_core_exception_rejects_only_its_command(shard: Shard, monkeypatch: pytest.MonkeyPatch) -> None:
    task = started(shard)
    started(shard, OTHER, offset=1)
    real = shard_module.decide

    def decide(workflow: Any, cmd: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        step = real(workflow, cmd, *args, **kwargs)  # the workflow object is already changed when it raises
        if cmd["workflow_id"] == WF and cmd["body"][1].get("signal_name") == "explode":
            raise RuntimeError("a bug in the core")
        return step

    monkeypatch.setattr(shard_module, "decide", decide)
    batch = [signal_command(WF, "fine"), signal_command(OTHER, "ok"), signal_command(WF, "explode", request_id="x"),
             signal_command(WF, "fine-too")]
    for offset, data in enumerate(batch, start=2):
        shard.process(data, offset, NOW)
    assert [(r.code, r.command and r.command["request_id"]) for r in shard.rejections] == [("INTERNAL", "x")]
    assert "RuntimeError: a bug in the core" in shard.rejections[0].message
    assert ("Rejected", "INTERNAL") in [(n, b.get("code")) for n, b in replies(shard.outputs)]
    out = commit(shard)

    signals = [(k, v["attributes"][1]["signal_name"]) for _, k, v in decoded(out, Topic.HISTORY)
               if v and v["event_type"] == ev.WORKFLOW_EXECUTION_SIGNALED]
    assert [s for _, s in signals] == ["fine", "ok", "fine-too"]
    wf_ids = [v["event_id"] for _, k, v in decoded(out, Topic.HISTORY) if v and k.startswith(f"{NS}/{WF}/".encode())]
    assert wf_ids == list(range(3, 3 + len(wf_ids)))  # no gap where the failed command's events would have been
    assert run_state(shard, WF, task["run_id"]).signal_count == 2


def test_an_output_over_the_record_limit_is_too_large(shard: Shard, monkeypatch: pytest.MonkeyPatch) -> None:
    task = started(shard)
    monkeypatch.setattr(shard_module, "MAX_RECORD_BYTES", 4_000)
    big = [{"metadata": {"encoding": b"binary/plain"}, "data": b"x" * 5_000}]
    shard.process(command("SignalWorkflowExecution", {"signal_name": "huge", "input": big}, workflow_id=WF,
                          request_id="big"), 1, NOW)
    shard.process(start_command(OTHER, input=big), 2, NOW)
    shard.process(signal_command(WF, "small"), 3, NOW)

    assert [(r.code, r.command and r.command["request_id"]) for r in shard.rejections] == [
        ("TOO_LARGE", "big"), ("TOO_LARGE", "start")]
    assert "4000-byte" in shard.rejections[0].message
    assert [(n, b["code"]) for n, b in replies(shard.outputs) if n == "Rejected"] == [("Rejected", "TOO_LARGE")] * 2
    out = commit(shard)
    assert [v["event_id"] for _, _, v in decoded(out, Topic.HISTORY) if v] == [3]  # "small" (a task is in flight)
    assert run_state(shard, WF, task["run_id"]).signal_count == 1
    assert shard.store.get(Family.STATE, workflow_key(NS, OTHER).encode()) is None


# -- the in-memory engine and the Kafka shards agree -----------------------------------------------------------------

def scenario(engine: InMemoryEngine) -> Iterator[str]:
    """Hello with a retried activity, a sleeper with a timer, a waiter for signals; then retention. Every start
    comes first: the engine's deadlines take commands-log offsets (which run ids derive from), the shards' do not."""
    for name in ("hello", "sleepy", "waiter"):
        engine.start_workflow(NS, name, name.title(), f"q-{name}", [payload(name)])
    yield "started"
    retry = {"initial_interval_ms": 1_000, "backoff_coefficient": 2.0}
    charge = {"activity_id": "charge", "activity_type": "Charge", "start_to_close_timeout_ms": 5_000,
              "retry_policy": retry}
    engine.complete_workflow_task(task_of(engine, "q-hello"), [("ScheduleActivityTaskCommand", charge)])
    engine.complete_workflow_task(task_of(engine, "q-sleepy"), [TIMER])
    engine.complete_workflow_task(task_of(engine, "q-waiter"))
    activity = engine.poll_activity_task("q-hello")
    assert activity is not None
    engine.start_activity(activity)
    engine.fail_activity(activity, "card declined")
    yield "waiting"
    for i, name in enumerate(["a", "b", "c"]):  # one batch of several commands
        engine.submit({"namespace": NS, "workflow_id": "waiter", "run_id": "", "request_id": f"sig-{i}",
                       "identity": "client", "time_ms": 0, "reply_partition": 1, "body": (
                           "ostinato.command.SignalWorkflowExecution", {"signal_name": name, "input": []})})
    engine.run_until_idle()
    engine.complete_workflow_task(task_of(engine, "q-waiter"))  # "b" and "c" came while it ran: another task
    engine.complete_activity(activity)  # the failed attempt's answer: stale
    engine.advance(1_000)
    activity = engine.poll_activity_task("q-hello")
    assert activity is not None and activity["attempt"] == 2
    engine.start_activity(activity)
    engine.complete_activity(activity, [payload("charged")])
    yield "retried"
    engine.advance(4_000)  # the sleeper's timer
    for name in ("hello", "sleepy", "waiter"):
        engine.complete_workflow_task(task_of(engine, f"q-{name}"), [COMPLETE])
    yield "completed"
    engine.advance(CONFIG.retention_ms)
    yield "deleted"


def test_the_kafka_shards_make_the_same_histories_as_the_in_memory_engine() -> None:
    engine, shards = InMemoryEngine(shards=2), ShardEngine(shards=2)
    steps = 0
    for step, again in zip(scenario(engine), scenario(shards), strict=True):
        assert step == again
        expected, actual = snapshot(engine), snapshot(shards)
        for part in expected:
            assert actual[part] == expected[part], f"{part} differs after {step!r}"
        for owner in shards.owners:  # what a restore derives from the changelog equals what live processing kept
            assert rebuilt_from_changelog(owner.store, CONFIG) == {
                f: family(owner.store, f) for f in (Family.TIMERS, Family.SIZES)}, f"restore differs after {step!r}"
        steps += 1
    assert steps == 5
    assert engine.rejections == {"STALE_TASK": 1}
    assert snapshot(shards)["histories"] == {} and snapshot(shards)["state"] == {}


def test_deadlines_due_at_once_fire_in_the_same_order_as_in_the_engine() -> None:
    def fan_out(engine: InMemoryEngine) -> dict[Any, Any]:
        engine.start_workflow(NS, "fan", "Fan", Q)
        engine.complete_workflow_task(task_of(engine, Q), [
            *[("ScheduleActivityTaskCommand", {"activity_id": f"a{i}", "activity_type": "A",
                                               "start_to_close_timeout_ms": 5_000,
                                               "schedule_to_close_timeout_ms": 3_000}) for i in range(7)],
            *[("StartTimerCommand", {"timer_id": t, "start_to_fire_timeout_ms": 2_000}) for t in ("a", "a-b")]])
        engine.advance(5_000)
        return engine.histories

    assert fan_out(ShardEngine(shards=2)) == fan_out(InMemoryEngine(shards=2))


def test_the_workflow_cache_never_keeps_what_an_abort_rolled_back(shard: Shard) -> None:
    """Decoded workflows are cached between batches; an aborted batch must not leave its changes in the cache."""
    started(shard)
    shard.process(signal_command(WF, "lost"), 1, NOW + 1)
    assert shard.rejections == [] and event_types(shard.outputs) == ["WORKFLOW_EXECUTION_SIGNALED"]
    shard.reset()  # the transaction aborted
    shard.process(signal_command(WF, "kept"), 1, NOW + 2)
    out = commit(shard)
    [(_, _, signaled)] = [d for d in decoded(out, Topic.HISTORY) if d[2] is not None]
    assert signaled["attributes"][1]["signal_name"] == "kept"
    fresh = Shard(HOME, shard.store, topology(S), CONFIG)  # decodes everything from the store
    shard.process(signal_command(WF, "third", request_id="x"), 2, NOW + 3)
    fresh.process(signal_command(WF, "third", request_id="x"), 2, NOW + 3)
    assert [(o.topic, o.key, o.value) for o in shard.outputs] == [(o.topic, o.key, o.value) for o in fresh.outputs]


def test_each_namespace_closes_runs_with_its_own_retention(shard: Shard) -> None:
    """The retention deadline of a closed run comes from its namespace's settings."""
    from dataclasses import replace

    from ostinato.services.history.changelog import parse_timer_key

    short = replace(CONFIG, retention_ms=60_000)
    scoped = Shard(HOME, MemoryStore(), topology(S), CONFIG, config_for=lambda ns: short if ns == NS else CONFIG)
    task = started(scoped)
    scoped.process(complete_command(task, COMPLETE), 1, NOW + 500)
    commit(scoped)
    retention = [d for _, _, d in (parse_timer_key(k) for k in family(scoped.store, Family.TIMERS))
                 if d.kind == "RETENTION"]
    assert [d.fire_at_ms for d in retention] == [NOW + 500 + 60_000]
