"""The activity-worker conformance driver: plays the engine for any worker binary on a real broker.

It creates a fresh prefix's commands, replies and task topics, serves `GET /api/v1/cluster` for them, starts the
worker (a command line with `{server}` and `{queue}` in it), produces every task of `activity_tasks.json` to the
queue's activity topic, answers the worker's commands as an owner would (Accepted, or what a fixture scripts), and
checks each command the worker produced: its envelope, key and shard, and its body against the fixture.

    python schemas/conformance/driver.py --kafka 127.0.0.1:9092 -- java -cp '...' io.ostinato.testworker.TestWorker \
        {server} {queue}

Exit status 0 when every fixture passed; the report names each fixture and what differed.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shlex
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from ostinato.schemas import codec, partition_for, wire
from ostinato.schemas.keys import join_key, workflow_key

FIXTURES = Path(__file__).with_name("activity_tasks.json")
SHARDS = 4
REPLY_PARTITIONS = 8
TASK_PARTITIONS = 4
FINAL = {wire.command_type(n) for n in
         ("RespondActivityTaskCompleted", "RespondActivityTaskFailed", "RespondActivityTaskCanceled")}
STARTED = wire.command_type("RecordActivityTaskStarted")
HEARTBEAT = wire.command_type("RecordActivityTaskHeartbeat")
Record = dict[str, Any]


def payload(spec: Record) -> Record:
    """A fixture's input payload as the wire record."""
    if "json" in spec:
        data = json.dumps(spec["json"], ensure_ascii=False, separators=(",", ":")).encode()
        return {"metadata": {"encoding": b"json/plain"}, "data": data}
    if spec.get("null"):
        return {"metadata": {"encoding": b"binary/null"}, "data": b""}
    return {"metadata": {"encoding": b"binary/plain"}, "data": base64.b64decode(spec["base64"])}


def expected_payload(spec: Record) -> Record:
    data = spec["json"].encode() if "json" in spec else base64.b64decode(spec["base64"])
    return {"metadata": {"encoding": spec["encoding"].encode()}, "data": data}


def task_record(fixture: Record, workflow_id: str, queue: str) -> Record:
    spec = fixture["task"]
    now = int(time.time() * 1000)
    return {
        "namespace": "default", "workflow_id": workflow_id, "run_id": f"run-{fixture['name']}",
        "workflow_type": "Conformance", "activity_id": "1", "activity_type": spec["activity_type"],
        "task_queue": queue, "scheduled_event_id": 5, "attempt": spec.get("attempt", 1),
        "input": [payload(p) for p in spec.get("input", [])], "header": {},
        "heartbeat_details": [payload(p) for p in spec.get("heartbeat_details", [])],
        "scheduled_time_ms": now, "current_attempt_scheduled_time_ms": now, "start_to_close_timeout_ms": 30_000,
        "schedule_to_close_timeout_ms": None, "heartbeat_timeout_ms": spec.get("heartbeat_timeout_ms"),
        "retry_policy": None,
    }


@dataclass
class Case:
    """One fixture in flight: its task and every command the worker sent for it, with where it was sent."""

    fixture: Record
    task: Record
    commands: list[tuple[int, str, Record]] = field(default_factory=list)
    heartbeats_answered: int = 0

    @property
    def finished(self) -> bool:
        return any(c["body"][0] in FINAL for _, _, c in self.commands)

    def problems(self) -> list[str]:
        found = []
        key = workflow_key(self.task["namespace"], self.task["workflow_id"])
        for partition, got_key, command in self.commands:
            name = wire.short_name(command["body"][0])
            if got_key != key or partition != partition_for(key, SHARDS):
                found.append(f"{name}: key {got_key!r} on partition {partition}, expected {key!r} on "
                             f"{partition_for(key, SHARDS)} (murmur2 over {SHARDS} shards)")
            for field_name in ("namespace", "workflow_id", "run_id"):
                if command[field_name] != self.task[field_name]:
                    found.append(f"{name}: envelope {field_name} {command[field_name]!r}, expected the task's")
            body = command["body"][1]
            if (body.get("scheduled_event_id"), body.get("attempt")) != (5, self.task["attempt"]):
                found.append(f"{name}: answers scheduled_event_id/attempt {body.get('scheduled_event_id')}/"
                             f"{body.get('attempt')}, expected 5/{self.task['attempt']}")
        names = [c["body"][0] for _, _, c in self.commands]
        if not names or names[0] != STARTED:
            sent = [wire.short_name(n) for n in names]
            found.append(f"the first command must be RecordActivityTaskStarted, got {sent}")
        elif self.commands[0][2]["reply_partition"] is None:
            found.append("RecordActivityTaskStarted must name a reply_partition: the worker waits for the answer")
        found += self._heartbeat_problems()
        found += self._final_problems(names)
        return found

    def _heartbeat_problems(self) -> list[str]:
        rule = self.fixture.get("heartbeats")
        beats = [c["body"][1] for _, _, c in self.commands if c["body"][0] == HEARTBEAT]
        if rule is None:
            return []
        found = []
        if len(beats) < rule["at_least"]:
            found.append(f"expected at least {rule['at_least']} heartbeats, got {len(beats)}")
        first = rule.get("first_details")
        if first is not None and beats and beats[0]["details"] != [expected_payload(p) for p in first]:
            found.append(f"first heartbeat's details {beats[0]['details']}, expected {first}")
        return found

    def _final_problems(self, names: list[str]) -> list[str]:
        want = self.fixture["expect"]
        finals = [(n, c["body"][1]) for n, (_, _, c) in zip(names, self.commands, strict=True) if n in FINAL]
        if want["command"] is None:
            extra = [wire.short_name(n) for n in names[1:]]
            return [f"a rejected start must not be run, but the worker sent {extra}"] if extra else []
        if len(finals) != 1:
            return [f"expected one {want['command']}, got {[wire.short_name(n) for n, _ in finals]}"]
        name, body = finals[0]
        if name != wire.command_type(want["command"]):
            detail = body.get("failure", {}).get("message", "") if isinstance(body.get("failure"), dict) else ""
            return [f"answered {wire.short_name(name)} {detail!r}, expected {want['command']}"]
        found = []
        if "result" in want and body["result"] != [expected_payload(p) for p in want["result"]]:
            found.append(f"result {body['result']}, expected {want['result']}")
        for key, value in want.get("failure", {}).items():
            got = body["failure"][key]
            if key == "details":
                value = [expected_payload(p) for p in value]
            if got != value:
                found.append(f"failure.{key} is {got!r}, expected {value!r}")
        least = want.get("details_json_int_at_least")
        if least is not None:
            details = body["details"]
            ok = (len(details) == 1 and details[0]["metadata"].get("encoding") == b"json/plain"
                  and isinstance(json.loads(details[0]["data"]), int) and json.loads(details[0]["data"]) >= least)
            if not ok:
                found.append(f"canceled details {details}, expected the last heartbeat's (a JSON integer)")
        return found


class Engine:
    """The owner's side, for the driver's topics only: reads commands, answers those that ask, files the rest."""

    def __init__(self, bootstrap: str, prefix: str, cases: dict[str, Case]) -> None:
        self.prefix = prefix
        self.cases = cases
        self.request_ids: set[str] = set()
        self.duplicates: list[str] = []
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}-driver",
                                  "enable.auto.commit": False, "isolation.level": "read_committed"})
        self.consumer.assign([TopicPartition(f"{prefix}.commands", p, 0) for p in range(SHARDS)])

    def pump(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            msg = self.consumer.poll(0.05)
            if msg is None or msg.error() is not None:
                continue
            _, command = codec.decode(msg.value() or b"")
            case = self.cases.get(command["workflow_id"])
            if case is None:
                continue
            if command["request_id"] in self.request_ids:
                self.duplicates.append(command["request_id"])
            self.request_ids.add(command["request_id"])
            case.commands.append((int(msg.partition() or 0), (msg.key() or b"").decode(), command))
            if command["reply_partition"] is not None:
                self._answer(case, command)
        self.producer.flush(10)

    def _answer(self, case: Case, command: Record) -> None:
        answers = case.fixture.get("answers", {})
        name = command["body"][0]
        body: tuple[str, Record] = (wire.ACCEPTED, {"run_id": command["run_id"], "cancel_requested": False})
        if name == STARTED and "started" in answers:
            body = wire.rejected(answers["started"]["rejected"], "scripted by the conformance fixture")
        elif name == HEARTBEAT:
            case.heartbeats_answered += 1
            if answers.get("heartbeat", {}).get("cancel_requested"):
                body = (wire.ACCEPTED, {"run_id": command["run_id"], "cancel_requested": True})
        reply = wire.reply(command["request_id"], command["namespace"], command["workflow_id"], body)
        self.producer.produce(f"{self.prefix}.replies", codec.encode(wire.REPLY, reply), command["request_id"].encode(),
                              partition=command["reply_partition"])
        self.producer.poll(0)

    def close(self) -> None:
        self.consumer.close()


def serve_cluster(bootstrap: str, prefix: str) -> ThreadingHTTPServer:
    """`GET /api/v1/cluster` as `ostinato server` answers it, for the driver's topics."""
    answer = json.dumps({"kafka_bootstrap": bootstrap, "kafka_security": {}, "topic_prefix": prefix,
                         "shards": SHARDS, "replication_factor": 1, "reply_partitions": REPLY_PARTITIONS,
                         "server_version": "conformance"}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path.split("?")[0] == "/api/v1/cluster"
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(answer if found else b'{"code": "not_found"}')

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def create_topics(bootstrap: str, prefix: str, queue: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(f"{prefix}.commands", SHARDS, 1), NewTopic(f"{prefix}.replies", REPLY_PARTITIONS, 1)]
    topics += [NewTopic(f"{prefix}.tasks.{queue}.{kind}", TASK_PARTITIONS, 1) for kind in ("workflow", "activity")]
    for future in admin.create_topics(topics).values():
        future.result(60)


def run(bootstrap: str, worker_argv: list[str], log: Path, env: dict[str, str] | None = None,
        settle_s: float = 60.0) -> dict[str, list[str]]:
    """Run every fixture against the worker (its environment: this one, `env` over it); fixture name -> problems
    (empty when it passed)."""
    fixtures = json.loads(FIXTURES.read_text())["fixtures"]
    prefix, queue = f"conf{uuid.uuid4().hex[:10]}", "conformance"
    create_topics(bootstrap, prefix, queue)
    http = serve_cluster(bootstrap, prefix)
    server = f"http://127.0.0.1:{http.server_address[1]}"
    argv = [a.replace("{server}", server).replace("{queue}", queue) for a in worker_argv]
    cases = {f"conformance-{f['name']}": Case(f, task_record(f, f"conformance-{f['name']}", queue)) for f in fixtures}
    engine = Engine(bootstrap, prefix, cases)
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    try:
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for case in cases.values():
            key = join_key(case.task["namespace"], case.task["workflow_id"], case.task["activity_id"])
            producer.produce(f"{prefix}.tasks.{queue}.activity", codec.encode(wire.ACTIVITY_TASK, case.task),
                             key.encode(), partition=partition_for(key, TASK_PARTITIONS))
        producer.flush(30)
        # Until every fixture that expects an answer has one (bounded: a worker that never answers fails them).
        deadline = time.monotonic() + settle_s
        waiting = [c for c in cases.values() if c.fixture["expect"]["command"] is not None]
        while time.monotonic() < deadline and not all(c.finished for c in waiting):
            if proc.poll() is not None:
                break
            engine.pump(0.2)
        engine.pump(1.0)  # what else the worker sends now, e.g. for a start it was refused
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        engine.close()
        http.shutdown()
    report = {name: case.problems() for name, case in cases.items()}
    if engine.duplicates:
        report["request-ids"] = [f"request ids reused: {engine.duplicates}"]
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kafka", required=True, help="bootstrap servers of a broker the driver may create topics on")
    parser.add_argument("--log", type=Path, default=Path("conformance-worker.log"))
    parser.add_argument("worker", nargs=argparse.REMAINDER, help="the worker's command line ({server}, {queue})")
    args = parser.parse_args()
    argv = [a for a in args.worker if a != "--"]
    if not argv:
        parser.error("give the worker's command line after --")
    report = run(args.kafka, argv, args.log)
    for name, problems in report.items():
        print(f"{'ok  ' if not problems else 'FAIL'} {name}")
        for problem in problems:
            print(f"       {problem}")
    print(f"worker: {shlex.join(argv)}")
    return 0 if not any(report.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
