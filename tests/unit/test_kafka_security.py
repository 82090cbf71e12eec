"""Kafka client security settings, the ACLs of each role and the SASL broker's configuration, without a broker."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from ostinato.infra.errors import InfraError
from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import (
    KafkaConfigError,
    base_config,
    describe_security,
    public_security,
    read_properties,
    redacted,
    security_config,
)
from ostinato.schemas.cluster import ClusterSettings
from ostinato.services.admin.acls import Pattern, Resource, Role, bindings, kafka_acls_commands, role_grants
from tests.conftest import run_cli

SECRET = "pa55-w0rd"


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# -- settings --------------------------------------------------------------------------------------------------


def test_a_properties_file_gives_security_settings(tmp_path: Path) -> None:
    path = _write(tmp_path / "client.properties", "# SASL over TLS\n! also a comment\n\n"
                  "security.protocol = SASL_SSL\nsasl.mechanism: SCRAM-SHA-256\nsasl.username=orders-worker\n"
                  f"sasl.password={SECRET}=x\nssl.ca.location=/etc/ca.pem\n")
    assert read_properties(path) == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                                     "sasl.username": "orders-worker", "sasl.password": f"{SECRET}=x",
                                     "ssl.ca.location": "/etc/ca.pem"}


@pytest.mark.parametrize(("line", "says"), [
    ("bootstrap.servers=k:9092", "given with --kafka or OSTINATO_KAFKA"),
    ("sasl.jaas.config=org.apache...ScramLoginModule required;", "Java client setting (librdkafka takes sasl.username"),
    ("ssl.truststore.location=/x.jks", "librdkafka reads PEM: ssl.ca.location"),
    ("enable.idempotence=false", "enable.idempotence is not a security setting"),
    ("just-a-word", ":1: expected name=value"),
])
def test_a_properties_file_with_anything_but_security_settings_is_refused(tmp_path: Path, line: str,
                                                                          says: str) -> None:
    with pytest.raises(KafkaConfigError) as caught:
        read_properties(_write(tmp_path / "c.properties", line + "\n"))
    assert says in str(caught.value)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KafkaConfigError, match=r"cannot read the Kafka client settings .*nothing\.properties"):
        security_config(environ={"OSTINATO_KAFKA_CONFIG": str(tmp_path / "nothing.properties")})


def test_file_then_environment_then_caller(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.properties", "security.protocol=SASL_PLAINTEXT\nsasl.username=from-file\n"
                                             "sasl.password=file-secret\n")
    env = {"OSTINATO_KAFKA_CONFIG": str(path), "OSTINATO_KAFKA_SASL_USERNAME": "from-env",
           "OSTINATO_KAFKA_SSL_CA_LOCATION": "/ca.pem",
           # other OSTINATO_KAFKA_* variables are other settings, not librdkafka properties
           "OSTINATO_KAFKA": "k:9092", "OSTINATO_KAFKA_VERSION": "4.1.1", "OSTINATO_KAFKA_HEAP": "-Xmx1g"}
    assert security_config(environ=env) == {
        "security.protocol": "SASL_PLAINTEXT", "sasl.username": "from-env", "sasl.password": "file-secret",
        "ssl.ca.location": "/ca.pem", "sasl.mechanism": "SCRAM-SHA-512"}  # a SASL protocol defaults to SCRAM-512
    mine = security_config({"sasl.username": "mine", "sasl.mechanism": "SCRAM-SHA-256"}, environ=env)
    assert (mine["sasl.username"], mine["sasl.mechanism"]) == ("mine", "SCRAM-SHA-256")
    assert security_config(environ={}) == {}
    with pytest.raises(KafkaConfigError, match=r"group\.id is not a security setting"):
        security_config({"group.id": "steal"}, environ={})


def test_base_config_keeps_what_the_code_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSTINATO_KAFKA_SECURITY_PROTOCOL", "SSL")
    monkeypatch.delenv("OSTINATO_KAFKA_CONFIG", raising=False)
    config = base_config("k:9092", "me", {"ssl.ca.location": "/ca.pem"})
    assert (config["bootstrap.servers"], config["client.id"]) == ("k:9092", "me")
    assert (config["security.protocol"], config["ssl.ca.location"]) == ("SSL", "/ca.pem")
    assert "sasl.mechanism" not in config


def test_secrets_never_show() -> None:
    settings = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u",
                "sasl.password": SECRET, "ssl.key.password": SECRET, "ssl.key.pem": SECRET,
                "sasl.oauthbearer.client.secret": SECRET, "ssl.keystore.password": SECRET}
    for shown in (json.dumps(redacted(settings)), describe_security(settings), json.dumps(public_security(settings))):
        assert SECRET not in shown
    assert "sasl.username=u" in describe_security(settings) and "sasl.password=***" in describe_security(settings)
    assert public_security(settings) == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}
    assert describe_security({}) == "PLAINTEXT (no security settings)"


def test_the_cluster_answer_tells_the_protocol_and_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    from ostinato.services.server import ServerContext, create_app

    monkeypatch.delenv("OSTINATO_KAFKA_CONFIG", raising=False)
    monkeypatch.setenv("OSTINATO_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("OSTINATO_KAFKA_SASL_USERNAME", "server")
    monkeypatch.setenv("OSTINATO_KAFKA_SASL_PASSWORD", SECRET)
    settings = ClusterSettings("ostinato", 2, 1, 8, 0, "test")
    app = create_app(ServerContext("k:9092", settings))

    async def fetch() -> tuple[str, dict[str, object]]:
        async with TestClient(TestServer(app)) as client:
            resp = await client.get("/api/v1/cluster")
            text = await resp.text()
            return text, json.loads(text)

    text, body = asyncio.run(fetch())
    assert body["kafka_security"] == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}
    assert SECRET not in text and "server" not in json.dumps(body["kafka_security"])


def test_the_cli_refuses_a_bad_settings_file_in_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.properties", "sasl.jaas.config=x\n")
    out = run_cli("cluster", "status", "--kafka-config", str(path), timeout=60)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "sasl.jaas.config is a Java client setting" in out.stderr


def test_dev_takes_security_settings_only_with_a_broker_of_ones_own(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.properties", "security.protocol=SASL_PLAINTEXT\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSTINATO_KAFKA")}
    out = run_cli("dev", "--kafka-config", str(path), "--home", str(tmp_path / "dev"), env=env, timeout=60)
    assert out.returncode == 1 and "need a broker of your own (OSTINATO_KAFKA)" in out.stderr
    assert not (tmp_path / "dev").exists()


# -- ACLs ------------------------------------------------------------------------------------------------------


def test_a_worker_is_granted_its_queue_only() -> None:
    grants = role_grants(Role.WORKER, "p", "orders")
    assert all(g.pattern is Pattern.LITERAL for g in grants)  # a prefix on p.tasks.orders would cover orders.eu
    by_name = {g.name: set(g.operations) for g in grants}
    assert by_name == {
        "p.tasks.orders.workflow": {"READ"}, "p.tasks.orders.activity": {"READ"}, "p.commands": {"WRITE"},
        "p.replies": {"READ", "WRITE"}, "p-worker-orders": {"READ"}, "p-worker-orders-unused": {"DESCRIBE"}}
    assert not any("CREATE" in g.operations for g in grants)
    with pytest.raises(ValueError, match="give --queue"):
        role_grants(Role.WORKER, "p")
    with pytest.raises(ValueError):
        role_grants(Role.WORKER, "p", "bad/queue")


def test_an_auditor_reads_history_and_writes_nothing() -> None:
    grants = role_grants(Role.AUDITOR, "p")
    assert {op for g in grants for op in g.operations} <= {"READ", "DESCRIBE"}
    assert {g.name for g in grants if g.resource is Resource.TOPIC} == {"p.history"}
    with pytest.raises(ValueError, match="--queue is for the worker role"):
        role_grants(Role.AUDITOR, "p", "orders")


def test_the_server_owns_its_prefix() -> None:
    grants = {g.resource: g for g in role_grants(Role.SERVER, "p")}
    assert (grants[Resource.TOPIC].pattern, grants[Resource.TOPIC].name) == (Pattern.PREFIXED, "p.")
    assert {"READ", "WRITE", "CREATE"} <= set(grants[Resource.TOPIC].operations)
    assert (grants[Resource.GROUP].name, grants[Resource.TRANSACTIONAL_ID].name) == ("p-", "p-processor-")
    acls = bindings(role_grants(Role.SERVER, "p"), "srv")
    assert len(acls) == sum(len(g.operations) for g in grants.values())
    assert {a.principal for a in acls} == {"User:srv"}
    lines = kafka_acls_commands(role_grants(Role.SERVER, "p"), "User:srv", "k:9092")
    assert "--operation DescribeConfigs" in lines[0] and "--resource-pattern-type prefixed" in lines[0]
    assert lines[-1].endswith("--cluster")


def test_the_server_may_write_the_egress_topics_it_allows() -> None:
    grants = role_grants(Role.SERVER, "p", egress=["orders.*", "shop.events"])
    egress = [(g.pattern, g.name, g.operations) for g in grants if g.resource is Resource.TOPIC
              and not g.name.startswith("p.")]
    assert egress == [(Pattern.PREFIXED, "orders.", ("WRITE",)), (Pattern.LITERAL, "shop.events", ("WRITE",))]
    with pytest.raises(ValueError, match="cannot express"):
        role_grants(Role.SERVER, "p", egress=["orders.*.v1"])
    with pytest.raises(ValueError, match="server role"):
        role_grants(Role.AUDITOR, "p", egress=["orders.*"])


def test_acl_print_needs_no_broker() -> None:
    out = run_cli("acl", "print", "--role", "worker", "--queue", "orders", "--prefix", "p", "-o", "json", timeout=60)
    assert out.returncode == 0, out.stderr
    assert {g["name"] for g in json.loads(out.stdout)} >= {"p.tasks.orders.workflow", "p-worker-orders"}


# -- the SASL broker of infra/ ---------------------------------------------------------------------------------


def test_a_sasl_broker_enforces_acls_with_one_super_user(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path, nodes=1, port=19092, sasl=True)
    props = cluster.properties(cluster.nodes[0])
    assert props["listeners"] == "SASL_PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert props["super.users"] == "User:admin" and props["allow.everyone.if.no.acl.found"] == "false"
    assert "SCRAM-SHA-512" in props["sasl.enabled.mechanisms"] and "SCRAM-SHA-256" in props["sasl.enabled.mechanisms"]
    admin = cluster.admin_security()
    assert admin["sasl.username"] == "admin" and len(admin["sasl.password"]) >= 24
    assert stat.S_IMODE(cluster.admin_properties.stat().st_mode) == 0o600
    assert read_properties(cluster.admin_properties) == admin  # usable as --kafka-config as it is
    cluster.layout.save(tmp_path / "cluster.json")
    assert admin["sasl.password"] not in (tmp_path / "cluster.json").read_text()
    assert KafkaCluster.existing(tmp_path).layout.sasl  # type: ignore[union-attr]
    with pytest.raises(InfraError, match="with SASL"):
        KafkaCluster(tmp_path, nodes=1, port=19092, sasl=False)


def test_a_plain_broker_has_no_security(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path, nodes=1, port=19092)
    assert cluster.admin_security() == {}
    assert "authorizer.class.name" not in cluster.properties(cluster.nodes[0])
