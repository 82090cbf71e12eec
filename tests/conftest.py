"""Fixtures shared by every tier: a real Kafka broker per session, started by the project's own infra."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ostinato.infra.kafka import KafkaCluster
from ostinato.infra.opensearch import OpenSearchServer
from ostinato.infra.s3 import S3Server
from ostinato.schemas import codec

REPO = Path(__file__).resolve().parents[1]

# Every encode in the tests (and in the servers and workers they start, which inherit the environment) is
# written both by the compiled Avro writers and by fastavro, and must come out the same (schemas/fast_writer.py).
os.environ.setdefault("OSTINATO_CODEC_CROSSCHECK", "1")
codec.settings_from_environment(os.environ)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One real single-node KRaft broker (transactions on) for the whole session, on free ports."""
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka"), nodes=1, port=None).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def kafka3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Three combined nodes, replication 3 and min ISR 2: for tests that lose a broker. Started on first use."""
    cluster = KafkaCluster(
        tmp_path_factory.mktemp("kafka3"), nodes=3, port=None,
        # Declare a killed broker dead after 6 s instead of 9 s so leadership moves sooner.
        extra_config={"broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "1000"},
    ).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def topic_prefix() -> str:
    """A prefix no other test uses, so tests share one broker without seeing each other's topics."""
    return f"t{uuid.uuid4().hex[:12]}"


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run the `ostinato` command as a user would, in a child process."""
    return subprocess.run([sys.executable, "-m", "ostinato", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.fixture(scope="session")
def opensearch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenSearchServer]:
    """One real single-node OpenSearch for the session, on free ports. Started on first use.

    `wipe` as well as `stop`: under root the node's data lives outside the pytest tmp dir (see infra/opensearch.py).
    """
    node = OpenSearchServer(tmp_path_factory.mktemp("opensearch"), port=None).start()
    yield node
    node.wipe()


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One real S3-compatible server (s3proxy over a directory) for the session, on a free port; on first use."""
    server = S3Server(tmp_path_factory.mktemp("s3"), port=None).start()
    yield server
    server.stop()


UNIT_PREFIX = "tests/unit/"


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `make test`'s two workers (pytest-xdist), every test outside the pure unit tier is one unit of work, so
    one worker runs them all, in the order collected and one at a time, beside one broker: they share servers and
    time their waits as they would in a single process. Each unit test is a unit of its own, for whichever worker
    is free. (xdist's `--dist loadgroup` would say this with marks, but it renames node ids, which pytest 9 no
    longer lets it do: every test then ran wherever.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ServersOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid if nodeid.startswith(UNIT_PREFIX) else "servers"

    return ServersOnOneWorker(config, log)


@pytest.fixture(autouse=True)
def _unit_tier_yields_the_cpu(request: pytest.FixtureRequest) -> None:
    """A worker running the unit tier lowers its own priority: those tests only use CPU, and beside them the server
    tiers' brokers and processes, whose waits are timed, go first. Once per process, never raised back."""
    if os.environ.get("PYTEST_XDIST_WORKER") and request.node.nodeid.startswith(UNIT_PREFIX) and not _niced:
        _niced.append(os.nice(10))


_niced: list[int] = []
