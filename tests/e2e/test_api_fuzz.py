"""schemathesis against the served OpenAPI document: generated requests (bounded) never get a 5xx, and every
answer matches the documented schema (errors included)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance
from schemathesis.openapi import from_url
from schemathesis.pytest import from_fixture

from ostinato.infra.kafka import KafkaCluster
from ostinato.services.cluster import init_cluster
from tests.tools.servers import ServerProcess


@schemathesis.serializer("application/vnd.ostinato.command+avro")
def _raw_bytes(ctx: object, value: object) -> bytes:
    """The SDK's command path takes Avro bytes: send whatever was generated as bytes (the gateway must refuse it
    with a 4xx, never a 5xx)."""
    return value if isinstance(value, bytes) else str(value).encode()


@pytest.fixture(scope="module")
def fuzz_server(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    prefix = f"fz{uuid.uuid4().hex[:8]}"
    init_cluster(kafka.bootstrap, prefix, shards=1)
    home: Path = tmp_path_factory.mktemp("fuzz")
    server = ServerProcess(kafka.bootstrap, prefix, home / "data", home / "server.log").start()
    try:
        server.wait_owning(1)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def api_schema(fuzz_server: ServerProcess) -> schemathesis.BaseSchema:
    schema = from_url(f"{fuzz_server.url}/api/v1/openapi.json")
    schema.config.update(base_url=fuzz_server.url)
    return schema


schema = from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors_and_answers_match_the_schema(case: schemathesis.Case) -> None:
    if case.query is not None and "timeout_ms" in case.query:
        case.query["timeout_ms"] = 200  # long polls and queries without a worker would otherwise wait 30-60 s
    if case.path.endswith(("/query", "/result")):
        case.query = {**(case.query or {}), "timeout_ms": 200}
        if isinstance(case.body, dict):
            case.body["timeout_ms"] = 200
    case.call_and_validate(checks=[not_a_server_error, response_schema_conformance], timeout=30)
