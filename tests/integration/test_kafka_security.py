"""Kafka security end to end: a SCRAM broker that enforces ACLs, a server with the server role's credentials, a worker
with only its queue's ACLs, an auditor that only reads history (docs/security.md).

The broker logs every denied operation (`kafka.authorizer.logger`), so beyond "the workflow completes" the tests
check that each role was refused nothing but what it must be refused: an ACL table missing a grant fails here even
when the code happens to tolerate the refusal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import NewTopic

from ostinato import activity, workflow
from ostinato.client import Client
from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import KafkaUnavailable, admin_client, base_config, wait_for_brokers
from ostinato.kafka.task_topics import worker_group
from ostinato.schemas.topics import TaskKind, Topic, task_topic_name, topic_name
from ostinato.services.admin.acls import Role, bindings, grant, revoke, role_grants, set_scram_user
from ostinato.worker import Worker
from tests.conftest import run_cli
from tests.tools.servers import ServerProcess

QUEUE = "orders"
OTHER_QUEUE = "payments"
SHARDS = 2
DENIED = re.compile(r"Principal = (\S+) is Denied operation = (\S+) from host = \S+ on resource = (\S+)")


@activity.defn
async def stamp(order: str) -> str:
    return f"{order}: packed"


@workflow.defn
class Pack:
    @workflow.run
    async def run(self, order: str) -> str:
        return await workflow.execute_activity(stamp, order, start_to_close_timeout=timedelta(seconds=20))


@pytest.fixture(scope="module")
def sasl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A single-node KRaft broker whose only listener is SASL_PLAINTEXT (SCRAM) and which enforces ACLs."""
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-sasl"), nodes=1, port=None, sasl=True).start()
    yield cluster
    cluster.stop()


def _user(kafka: KafkaCluster, name: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
    """A new SCRAM user; its librdkafka settings."""
    password = uuid.uuid4().hex
    set_scram_user(admin_client(kafka.bootstrap, kafka.admin_security()), name, password, mechanism)
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": name,
            "sasl.password": password}


def _grant(kafka: KafkaCluster, role: Role, prefix: str, principal: str, queue: str = "") -> None:
    grant(admin_client(kafka.bootstrap, kafka.admin_security()), bindings(role_grants(role, prefix, queue), principal))


def _properties(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("# test credentials\n" + "".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def _denials(kafka: KafkaCluster, principal: str) -> set[tuple[str, str]]:
    """(operation, resource) the broker refused `principal` so far."""
    text = kafka.log_file(kafka.nodes[0].node_id).read_text(errors="replace")
    return {(op, resource) for who, op, resource in DENIED.findall(text) if who == f"User:{principal}"}


def _first_error(consumer: Consumer, timeout: float = 30.0) -> KafkaError | None:
    """The first error the consumer reports; None if it reads a record or nothing happens in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        return msg.error()
    return None


def _produce_error(settings: dict[str, str], bootstrap: str, topic: str) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    producer = Producer(base_config(bootstrap, "test-intruder", settings))
    producer.produce(topic, b"forged", b"default/x", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    return errors[0] if errors else None


def test_roles_end_to_end(sasl_kafka: KafkaCluster, topic_prefix: str, tmp_path: Path,
                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    kafka = sasl_kafka
    server_user, worker_user, auditor_user = (f"{topic_prefix}-{r}" for r in ("server", "worker", "auditor"))
    server = _user(kafka, server_user)
    worker = _user(kafka, worker_user, "SCRAM-SHA-256")  # both mechanisms are on
    auditor = _user(kafka, auditor_user)
    _grant(kafka, Role.SERVER, topic_prefix, server_user)
    _grant(kafka, Role.WORKER, topic_prefix, worker_user, QUEUE)
    _grant(kafka, Role.AUDITOR, topic_prefix, auditor_user)
    server_props = _properties(tmp_path / "server.properties", server)

    # The server's principal initialises the cluster itself (the server role covers `cluster init`).
    init = run_cli("cluster", "init", "--kafka", kafka.bootstrap, "--prefix", topic_prefix, "--shards", str(SHARDS),
                   "--kafka-config", str(server_props))
    assert init.returncode == 0, init.stderr

    srv = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log",
                        extra_args=("--kafka-config", str(server_props))).start()
    try:
        srv.wait_owning(SHARDS)
        status, cluster = srv.get("/api/v1/cluster")
        assert status == 200
        assert cluster["kafka_security"] == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512"}
        assert server["sasl.password"] not in json.dumps(cluster)

        async def run() -> tuple[str, str]:
            client = await Client.connect(srv.url)
            try:
                async with Worker(client, task_queue=QUEUE, workflows=[Pack], activities=[stamp],
                                  kafka_config=worker):
                    result = await client.execute_workflow(Pack.run, "order-1", id=f"pack-{uuid.uuid4().hex[:8]}",
                                                           task_queue=QUEUE)
                # A workflow of another queue: the server creates that queue's task topics and dispatches its task.
                other = await client.start_workflow(Pack.run, "order-2", id=f"pay-{uuid.uuid4().hex[:8]}",
                                                    task_queue=OTHER_QUEUE)
                return result, other.id
            finally:
                await client.service.close()  # type: ignore[attr-defined]

        result, _ = asyncio.run(asyncio.wait_for(run(), 120))
        assert result == "order-1: packed"

        # The worker's credentials cannot read another queue's tasks, even from its own group...
        intruder = Consumer({**base_config(kafka.bootstrap, "test-intruder", worker),
                             "group.id": worker_group(topic_prefix, QUEUE), "enable.auto.commit": False})
        other_topic = task_topic_name(topic_prefix, OTHER_QUEUE, TaskKind.WORKFLOW)
        intruder.subscribe([other_topic])
        try:
            error = _first_error(intruder)
        finally:
            intruder.close()
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
        # ...nor write history, nor can the auditor write a command.
        history = topic_name(topic_prefix, Topic.HISTORY)
        error = _produce_error(worker, kafka.bootstrap, history)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
        error = _produce_error(auditor, kafka.bootstrap, topic_name(topic_prefix, Topic.COMMANDS))
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    finally:
        srv.stop()

    # The auditor reads the whole history, with its settings from OSTINATO_KAFKA_* variables.
    env = {**os.environ, **{f"OSTINATO_KAFKA_{k.upper().replace('.', '_')}": v for k, v in auditor.items()}}
    env.pop("OSTINATO_KAFKA_CONFIG", None)
    check = run_cli("check", "history", "--kafka", kafka.bootstrap, "--prefix", topic_prefix, "-o", "json", env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads(check.stdout)["runs"] == 2

    # The broker refused the server nothing, and the others only what they must be refused (a topic a principal
    # may not even describe is refused at its metadata request). The worker may also have tried to create its task
    # topics before the server did: tolerated, it waits for them.
    assert _denials(kafka, server_user) == set()
    intended = {("DESCRIBE", f"Topic:LITERAL:{other_topic}"), ("DESCRIBE", f"Topic:LITERAL:{history}")}
    refused = _denials(kafka, worker_user)
    assert intended <= refused
    assert refused - intended <= {("CREATE", f"Topic:LITERAL:{task_topic_name(topic_prefix, QUEUE, kind)}")
                                  for kind in TaskKind}, refused
    commands = topic_name(topic_prefix, Topic.COMMANDS)
    assert _denials(kafka, auditor_user) == {("DESCRIBE", f"Topic:LITERAL:{commands}")}
    # No credential reached a log: the server's, the worker's (in this process), the commands'.
    logged = (tmp_path / "server.log").read_text(errors="replace")
    assert "sasl.password=***" in logged and f"sasl.username={worker_user}" in caplog.text
    for settings in (server, worker, auditor):
        for text in (logged, caplog.text, init.stdout + init.stderr, check.stderr):
            assert settings["sasl.password"] not in text


def test_worker_waits_for_task_topics_it_may_not_create(sasl_kafka: KafkaCluster, topic_prefix: str) -> None:
    """A worker with only its queue's ACLs started before any workflow named the queue: it cannot create the topics,
    so it waits for them, and stops cleanly when asked to."""
    name = f"{topic_prefix}-early-worker"
    settings = _user(sasl_kafka, name)
    _grant(sasl_kafka, Role.WORKER, topic_prefix, name, QUEUE)
    cluster = {"kafka_bootstrap": sasl_kafka.bootstrap, "topic_prefix": topic_prefix, "shards": 1,
               "reply_partitions": 1, "replication_factor": 1}

    async def run() -> float:
        from ostinato.sdk._kafka_worker import KafkaWorkerTransport

        class Service:  # what a client's service gives a worker: its Kafka transport (no server needed here)
            def worker_transport(self) -> KafkaWorkerTransport:
                return KafkaWorkerTransport(cluster, _no_history)

        early = Worker(Client(Service()), task_queue=QUEUE, activities=[stamp],  # type: ignore[arg-type]
                       kafka_config=settings)
        task = asyncio.ensure_future(early.run())
        await asyncio.sleep(6)
        assert not task.done()
        started = time.monotonic()
        await early.shutdown()
        await asyncio.wait_for(task, 30)
        return time.monotonic() - started

    assert asyncio.run(run()) < 10
    refused = _denials(sasl_kafka, name)
    assert refused and {op for op, _ in refused} == {"CREATE"}


async def _no_history(namespace: str, workflow_id: str, run_id: str) -> list[dict[str, object]]:
    return []


def test_acl_commands_grant_and_revoke(sasl_kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    admin_props = str(sasl_kafka.admin_properties)
    user = f"{topic_prefix}-cli"
    made = run_cli("acl", "user-set", user, "--password-file", "-", "--kafka", sasl_kafka.bootstrap,
                   "--kafka-config", admin_props, timeout=60)
    # stdin is empty: refused before anything is sent
    assert made.returncode == 2 and "empty password" in made.stderr
    password_file = tmp_path / "pw"
    password_file.write_text("s3cret-" + uuid.uuid4().hex + "\n")
    made = run_cli("acl", "user-set", user, "--password-file", str(password_file), "--kafka", sasl_kafka.bootstrap,
                   "--kafka-config", admin_props, timeout=60)
    assert made.returncode == 0, made.stderr
    assert password_file.read_text().strip() not in made.stdout + made.stderr
    granted = run_cli("acl", "grant", "--role", "worker", "--queue", QUEUE, "--principal", user, "--prefix",
                      topic_prefix, "--kafka", sasl_kafka.bootstrap, "--kafka-config", admin_props, timeout=60)
    assert granted.returncode == 0, granted.stderr
    assert "granted 7 ACLs" in granted.stdout
    revoked = run_cli("acl", "revoke", "--role", "worker", "--queue", QUEUE, "--principal", user, "--prefix",
                      topic_prefix, "--kafka", sasl_kafka.bootstrap, "--kafka-config", admin_props, timeout=60)
    assert revoked.returncode == 0, revoked.stderr
    assert "removed 7 ACLs" in revoked.stdout
    assert revoke(admin_client(sasl_kafka.bootstrap, sasl_kafka.admin_security()),
                  bindings(role_grants(Role.WORKER, topic_prefix, QUEUE), user)) == 0


def test_wrong_credentials_say_so_without_the_password(sasl_kafka: KafkaCluster) -> None:
    wrong = {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "admin", "sasl.password": "not-the-password"}
    with pytest.raises(KafkaUnavailable) as caught:
        wait_for_brokers(admin_client(sasl_kafka.bootstrap, wrong), sasl_kafka.bootstrap, 5)
    assert "not-the-password" not in str(caught.value)
    plain = run_cli("cluster", "status", "--kafka", sasl_kafka.bootstrap, "--timeout", "5",
                    env={k: v for k, v in os.environ.items() if not k.startswith("OSTINATO_KAFKA")}, timeout=60)
    assert plain.returncode == 1 and "needs --kafka-config" in plain.stderr


def test_an_ingress_runs_on_its_own_role(sasl_kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    """`ostinato ingress run` as a principal granted only the ingress role of its file (`acl grant --role ingress
    --ingress FILE`): records start workflows, a bad one is a dead letter, and the broker refuses it nothing."""
    kafka = sasl_kafka
    server_user, ingress_user = f"{topic_prefix}-server", f"{topic_prefix}-ingress"
    server, ingress = _user(kafka, server_user), _user(kafka, ingress_user)
    _grant(kafka, Role.SERVER, topic_prefix, server_user)
    source = f"{topic_prefix}-shop-orders"
    config = tmp_path / "ingress.yaml"
    config.write_text(f"""
mappings:
  - name: orders
    topic: {source}
    action: start
    workflow_id: "order-{{value.n}}"
    workflow_type: Pack
    task_queue: {QUEUE}
    namespace: "{{headers.ns}}"
""")
    granted = run_cli("acl", "grant", "--role", "ingress", "--ingress", str(config), "--principal", ingress_user,
                      "--prefix", topic_prefix, "--kafka", kafka.bootstrap, "--kafka-config",
                      str(_properties(tmp_path / "admin.properties", kafka.admin_security())))
    assert granted.returncode == 0, granted.stdout + granted.stderr
    server_props = _properties(tmp_path / "server.properties", server)
    init = run_cli("cluster", "init", "--kafka", kafka.bootstrap, "--prefix", topic_prefix, "--shards", str(SHARDS),
                   "--kafka-config", str(server_props))
    assert init.returncode == 0, init.stderr
    admin = admin_client(kafka.bootstrap, kafka.admin_security())
    for future in admin.create_topics([NewTopic(source, 2, 1)]).values():
        future.result(30)
    producer = Producer(base_config(kafka.bootstrap, "test-shop", kafka.admin_security()))
    for n in range(5):
        producer.produce(source, json.dumps({"n": n}).encode(), str(n).encode(), headers=[("ns", b"default")])
    producer.produce(source, b"{oops", b"bad", headers=[("ns", b"default")])
    producer.produce(source, b'{"n": 9}', b"ghost", headers=[("ns", b"ghost")])  # a namespace nobody registered
    assert producer.flush(30) == 0

    srv = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log",
                        extra_args=("--kafka-config", str(server_props))).start()
    runner = subprocess.Popen([sys.executable, "-m", "ostinato", "ingress", "run", str(config),
                               "--kafka", kafka.bootstrap, "--prefix", topic_prefix, "--instance", "t1",
                               "--kafka-config", str(_properties(tmp_path / "ingress.properties", ingress))],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        srv.wait_owning(SHARDS)
        deadline = time.monotonic() + 90
        missing = [f"order-{n}" for n in range(5)]
        while missing and time.monotonic() < deadline:
            missing = [wf for wf in missing if srv.get(f"/api/v1/namespaces/default/workflows/{wf}")[0] != 200]
            time.sleep(0.3)
        assert not missing, f"not started: {missing}"
    finally:
        runner.terminate()
        output = runner.communicate(timeout=60)[0].decode(errors="replace")
        srv.stop()
    assert runner.returncode == 0, output
    assert _denials(kafka, ingress_user) == set()
    reader_ = Consumer({**base_config(kafka.bootstrap, "test-dlq", kafka.admin_security()), "group.id": "test-dlq",
                        "auto.offset.reset": "earliest"})
    try:
        reader_.subscribe([f"{source}.dlq"])
        deadline = time.monotonic() + 30
        letters: dict[bytes, bytes] = {}
        while len(letters) < 2 and time.monotonic() < deadline:
            msg = reader_.poll(0.5)
            if msg is not None and msg.error() is None:
                letters[msg.key()] = dict(msg.headers())["ostinato.error"]
    finally:
        reader_.close()
    assert sorted(letters) == [b"bad", b"ghost"], letters
    assert letters[b"bad"].startswith(b"the value is not JSON")
    assert letters[b"ghost"].startswith(b"namespace 'ghost' is not registered")
    assert ingress["sasl.password"] not in output
