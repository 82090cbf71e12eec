"""The full chaos forms (`chaos_full`) are deselected unless asked for: `-m chaos_full` or OSTINATO_CHAOS_FULL=1.
And `server`: one `ostinato server` process owning both shards of a fresh two-shard cluster."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.cluster import init_cluster
from tests.tools.servers import ServerProcess


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "chaos_full" in (config.getoption("markexpr") or "") or os.environ.get("OSTINATO_CHAOS_FULL") == "1":
        return
    full = [item for item in items if item.get_closest_marker("chaos_full") is not None]
    if full:
        config.hook.pytest_deselected(items=full)
        items[:] = [item for item in items if item.get_closest_marker("chaos_full") is None]


@pytest.fixture
def server(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> Iterator[ServerProcess]:
    init_cluster(kafka.bootstrap, topic_prefix, shards=2)
    srv = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log").start()
    srv.wait_owning(2)
    yield srv
    srv.stop()
