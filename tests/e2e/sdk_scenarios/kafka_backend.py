"""The real-broker backend of the scenarios: an `ostinato server` process (processor, gateway, owner reads) on the
session's Kafka broker, the client over HTTP and workers on Kafka, in wall-clock time."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ostinato.client import Client
from ostinato.infra.kafka import KafkaCluster
from ostinato.sdk._http import HttpService
from ostinato.services.admin.cluster import init_cluster
from tests.e2e.sdk_scenarios.envs import ScenarioEnv
from tests.tools.servers import ServerProcess

SHARDS = 2


class KafkaEnv(ScenarioEnv):
    def __init__(self, client: Client, service: HttpService) -> None:
        self.name = "kafka"
        self.client = client
        self.service = service
        self.task_queue = f"q-{uuid.uuid4().hex[:8]}"
        self.skips_time = False
        self.clock_slack = timedelta(seconds=3)  # commits, polls and a loaded CI machine between due and fired
        self.long_wait = timedelta(seconds=3)

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, duration: timedelta) -> None:
        await asyncio.sleep(duration.total_seconds())


@pytest.fixture(scope="session")
def scenario_server(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    prefix = f"sdk{uuid.uuid4().hex[:8]}"
    init_cluster(kafka.bootstrap, prefix, shards=SHARDS)
    home: Path = tmp_path_factory.mktemp("sdk-server")
    server = ServerProcess(kafka.bootstrap, prefix, home / "data", home / "server.log").start()
    try:
        server.wait_owning(SHARDS)
        yield server
    finally:
        server.stop()


@asynccontextmanager
async def kafka_backend(request: pytest.FixtureRequest) -> AsyncIterator[ScenarioEnv]:
    server: ServerProcess = request.getfixturevalue("scenario_server")
    service = await HttpService.connect(server.url)
    try:
        yield KafkaEnv(Client(service), service)
    finally:
        await service.close()
