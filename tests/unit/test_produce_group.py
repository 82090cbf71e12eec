"""How a batch's records reach librdkafka: a partition at a time through `produce_batch`, in the batch's order,
with a record that has headers produced alone in its place; a full local queue retried, any other refusal (or a
refusal followed by an accepted record, which would reorder a partition) failing the transaction.

A stand-in producer that records every call: what librdkafka does with the records is the broker tests' part
(`tests/integration/test_pipelined_commits.py`, `tests/chaos/`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from ostinato.services.admin.cluster import ClusterSettings
from ostinato.services.history.processor import Processor, ProcessorOptions
from ostinato.services.history.shard import Output, Sealed

QUEUE_FULL = KafkaError(KafkaError._QUEUE_FULL)


class Recorder:
    """Accepts every record, except that `refuse` maps a call number to the positions it refuses, and how."""

    def __init__(self, refuse: dict[int, dict[int, KafkaError]] | None = None) -> None:
        self.refuse = refuse or {}
        self.calls: list[tuple[str, str, int, list[bytes | None], Any]] = []
        self.polls = 0

    def produce_batch(self, topic: str, messages: list[dict[str, Any]], partition: int) -> int:
        refused = self.refuse.get(len(self.calls), {})
        self.calls.append(("batch", topic, partition, [m["key"] for m in messages],
                           [m.get("callback") is not None for m in messages]))
        for i, err in refused.items():
            messages[i]["_error"] = err
        return len(messages) - len(refused)

    def produce(self, topic: str, value: bytes | None, key: bytes | None, partition: int, on_delivery: Any,
                headers: list[tuple[str, bytes]]) -> None:
        self.calls.append(("one", topic, partition, [key], headers))

    def poll(self, timeout: float) -> int:
        self.polls += 1
        return 0


@pytest.fixture
def proc(tmp_path: Path) -> Processor:
    settings = ClusterSettings("p", 1, 1, 1, 0, "test")
    return Processor("127.0.0.1:1", settings, ProcessorOptions(data_dir=tmp_path, owner_id="test"))


def produce(proc: Processor, recorder: Recorder, *outputs: Output) -> None:
    proc.producer = cast(Producer, recorder)
    part = type("Part", (), {"outputs": list(outputs)})()
    proc._produce_batch({0: cast(Sealed, part)})


def test_each_partition_s_records_go_in_one_call_in_order_and_only_the_last_changelog_record_reports(
        proc: Processor) -> None:
    recorder = Recorder()
    history, tasks = proc.history_topic, "p.tasks"
    produce(proc, recorder, Output(history, 0, b"h1", b"1"), Output(tasks, 3, b"t1", b"x"),
            Output(history, 0, b"h2", b"2"), Output(tasks, 1, b"t2", b"y"), Output(tasks, 3, b"t3", None))
    assert recorder.calls == [("batch", history, 0, [b"h1", b"h2"], [False, True]),
                              ("batch", tasks, 3, [b"t1", b"t3"], [False, False]),
                              ("batch", tasks, 1, [b"t2"], [False])]


def test_a_record_with_headers_goes_alone_after_what_its_partition_gathered_before_it(proc: Processor) -> None:
    recorder = Recorder()
    produce(proc, recorder, Output("egress", 0, b"a", b"1"), Output("egress", 0, b"b", b"2", (("h", b"v"),)),
            Output("egress", 0, b"c", b"3"))
    assert recorder.calls == [("batch", "egress", 0, [b"a"], [False]), ("one", "egress", 0, [b"b"], [("h", b"v")]),
                              ("batch", "egress", 0, [b"c"], [False])]


def test_a_full_queue_sends_the_refused_rest_again_after_a_poll(proc: Processor) -> None:
    recorder = Recorder({0: {1: QUEUE_FULL, 2: QUEUE_FULL}})
    produce(proc, recorder, *(Output("t", 0, k, b"v") for k in (b"a", b"b", b"c")))
    assert [call[3] for call in recorder.calls] == [[b"a", b"b", b"c"], [b"b", b"c"]]
    assert recorder.polls == 1


@pytest.mark.parametrize("refused", [
    {0: QUEUE_FULL},  # b and c were accepted after a: sending a again would put it after them
    {1: KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)},
])
def test_any_other_refusal_fails_the_transaction(proc: Processor, refused: dict[int, KafkaError]) -> None:
    recorder = Recorder({0: refused})
    with pytest.raises(KafkaException) as raised:
        produce(proc, recorder, *(Output("t", 0, k, b"v") for k in (b"a", b"b", b"c")))
    assert raised.value.args[0].code() == next(iter(refused.values())).code()
    assert len(recorder.calls) == 1 and recorder.polls == 0
