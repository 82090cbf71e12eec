"""schemathesis against the served OpenAPI document: generated requests (bounded) never get a 5xx, and every
answer matches the documented schema (errors included).

Cases are drawn from schemathesis' Hypothesis strategies directly rather than through its pytest plugin, which does
not work with the pytest this project pins."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance
from schemathesis.openapi import from_url

from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.cluster import init_cluster
from tests.tools.servers import ServerProcess

EXAMPLES = 15  # per operation: bounded, so CI stays fast


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


def _short_waits(case: Any) -> None:
    """Long polls and queries without a worker would wait 30-60 s each."""
    if case.path.endswith(("/query", "/result")) or (case.query and "timeout_ms" in case.query):
        case.query = {**(case.query or {}), "timeout_ms": 200}
        if isinstance(case.body, dict):
            case.body["timeout_ms"] = 200
    if "/update" in case.path:  # an update's wait (a 303 to its long-poll), or the long-poll itself
        if case.method.upper() == "GET":
            case.query = {**(case.query or {}), "wait_ms": 200}
        elif isinstance(case.body, dict):
            case.body["timeout_ms"] = 200


def test_no_server_errors_and_answers_match_the_schema(fuzz_server: ServerProcess) -> None:
    schema = from_url(f"{fuzz_server.url}/api/v1/openapi.json")
    schema.config.update(base_url=fuzz_server.url)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20
    statuses: list[int] = []
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case: Any) -> None:
            _short_waits(case)
            response = case.call_and_validate(checks=[not_a_server_error, response_schema_conformance], timeout=30)
            statuses.append(response.status_code)

        try:
            check()
        except Exception as exc:
            exc.add_note(f"while fuzzing {operation.method.upper()} {operation.path}")
            raise
    assert len(statuses) >= len(operations) * 2, statuses  # the server was really called, case after case
    assert {s // 100 for s in statuses} >= {2, 4}, sorted(set(statuses))
