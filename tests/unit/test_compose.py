"""docker-compose.yml stays in step with the defaults `ostinato dev` uses (no Docker needed to check)."""

import json
import shlex
from pathlib import Path

import pytest
import yaml

from ostinato.infra import defaults
from ostinato.schemas.topics import DEFAULT_PREFIX
from ostinato.services.cli.dev import DEFAULT_DEV_SHARDS
from ostinato.services.server import DEFAULT_API_PORT

ROOT = Path(__file__).resolve().parents[2]
SERVICES = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
OSTINATO_SERVICES = ("ostinato-init", "ostinato")


def env(name: str) -> dict[str, str]:
    raw = SERVICES[name].get("environment", {})
    pairs = raw.items() if isinstance(raw, dict) else (item.split("=", 1) for item in raw)
    return {key: str(value) for key, value in pairs}


def command(name: str) -> list[str]:
    cmd = SERVICES[name]["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else [str(part) for part in cmd]


def option(name: str, flag: str) -> str:
    cmd = command(name)
    assert flag in cmd, f"{name} command lacks {flag}: {cmd}"
    return cmd[cmd.index(flag) + 1]


def port_map(name: str) -> dict[int, int]:  # "[ip:]host:container[/proto]" -> {host: container}
    pairs = (str(entry).rsplit(":", 2)[-2:] for entry in SERVICES[name].get("ports", []))
    return {int(host): int(container.split("/")[0]) for host, container in pairs}


def listeners(variable: str) -> dict[str, tuple[str, int]]:
    """KAFKA_LISTENERS-style "NAME://host:port,..." -> {NAME: (host, port)}."""
    result = {}
    for entry in env("kafka")[variable].split(","):
        listener, address = entry.split("://")
        host, port = address.rsplit(":", 1)
        result[listener] = (host, int(port))
    return result


def test_kafka_image_is_the_version_dev_runs() -> None:
    assert SERVICES["kafka"]["image"].rpartition(":")[2] == defaults.KAFKA_VERSION


@pytest.mark.parametrize(("service", "port"), [
    ("kafka", defaults.KAFKA_PORT), ("opensearch", defaults.OPENSEARCH_PORT),
    ("s3", defaults.S3_PORT), ("ostinato", DEFAULT_API_PORT),
])
def test_published_on_the_default_host_port(service: str, port: int) -> None:
    assert port in port_map(service), f"{service} publishes {port_map(service)}, expected host port {port}"


def test_server_listens_where_it_is_published() -> None:
    assert int(option("ostinato", "--port")) == DEFAULT_API_PORT
    assert port_map("ostinato")[DEFAULT_API_PORT] == DEFAULT_API_PORT
    assert option("ostinato", "--host") == "0.0.0.0"  # loopback inside a container is unreachable


@pytest.mark.parametrize(("name", "subcommand"), [("ostinato-init", ["cluster", "init"]), ("ostinato", ["server"])])
def test_dev_shard_count_and_topic_prefix(name: str, subcommand: list[str]) -> None:
    assert command(name)[: len(subcommand)] == subcommand
    assert int(option(name, "--shards")) == DEFAULT_DEV_SHARDS
    assert env(name)["OSTINATO_TOPIC_PREFIX"] == DEFAULT_PREFIX


@pytest.mark.parametrize("name", OSTINATO_SERVICES)
def test_bootstrap_is_a_listener_kafka_declares(name: str) -> None:
    host, port = env(name)["OSTINATO_KAFKA"].rsplit(":", 1)
    advertised = {(h, p): listener for listener, (h, p) in listeners("KAFKA_ADVERTISED_LISTENERS").items()}
    listener = advertised.get((host, int(port)))
    assert listener, f"{name} bootstraps from {host}:{port}, not an advertised listener: {advertised}"
    assert host in ("kafka", SERVICES["kafka"].get("hostname")), "containers reach Kafka by its service name"
    assert listeners("KAFKA_LISTENERS")[listener][1] == int(port)


def test_host_listener_is_the_published_default_port() -> None:
    host_facing = [(listener, port) for listener, (host, port) in listeners("KAFKA_ADVERTISED_LISTENERS").items()
                   if host in ("localhost", "127.0.0.1")]
    assert len(host_facing) == 1, host_facing
    listener, port = host_facing[0]
    assert port == defaults.KAFKA_PORT
    # The published container port must be the port that listener binds inside the container.
    assert port_map("kafka")[defaults.KAFKA_PORT] == listeners("KAFKA_LISTENERS")[listener][1]


def test_single_node_settings_fit_one_broker() -> None:
    kafka = env("kafka")
    voters = kafka["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert len(voters) == 1
    for key in ("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
                "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"):
        assert int(kafka[key]) == len(voters), key
    assert int(kafka["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"]) == 0
    assert kafka["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"


def test_server_waits_for_init_which_waits_for_a_healthy_kafka() -> None:
    assert "healthcheck" in SERVICES["kafka"]
    assert SERVICES["ostinato-init"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert SERVICES["ostinato"]["depends_on"]["ostinato-init"]["condition"] == "service_completed_successfully"


def test_every_build_runs_the_ostinato_cli() -> None:
    builds = {name: svc["build"] for name, svc in SERVICES.items() if "build" in svc}
    assert set(OSTINATO_SERVICES) <= set(builds)
    for name, build in builds.items():
        context, dockerfile = (build, "Dockerfile") if isinstance(build, str) else (
            build.get("context", "."), build.get("dockerfile", "Dockerfile"))
        path = ROOT / context / dockerfile
        assert path.is_file(), f"{name}: no {path}"
        entrypoints = [line.split(None, 1)[1] for line in path.read_text().splitlines()
                       if line.upper().startswith("ENTRYPOINT")]
        assert entrypoints and json.loads(entrypoints[-1]) == ["ostinato"], f"{name}: {entrypoints}"


def test_server_uses_the_compose_opensearch_and_s3() -> None:
    server = env("ostinato")
    assert server["OSTINATO_OPENSEARCH_URL"] == f"http://opensearch:{port_map('opensearch')[defaults.OPENSEARCH_PORT]}"
    assert server["OSTINATO_S3_ENDPOINT"] == f"http://s3:{port_map('s3')[defaults.S3_PORT]}"
    s3 = env("s3")
    assert (server["OSTINATO_S3_ACCESS_KEY"], server["OSTINATO_S3_SECRET_KEY"]) == (
        s3["S3PROXY_IDENTITY"], s3["S3PROXY_CREDENTIAL"])
    assert server["OSTINATO_ARCHIVE_URI"].startswith("s3://")
