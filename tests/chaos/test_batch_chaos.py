"""A batch terminate of N runs by query (issue 21), its server killed with SIGKILL part way and started again: the
job finishes with progress N done, and each run is terminated exactly once (checked from history)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from ostinato.client import Client
from ostinato.infra.kafka import KafkaCluster
from ostinato.sdk.batch import BatchTerminate
from ostinato.services.admin.checker import check_history
from ostinato.services.admin.cluster import init_cluster
from tests.tools.servers import ServerProcess

SHARDS = 2


async def _start_runs(client: Client, workflow_type: str, count: int) -> list[str]:
    """Start `count` runs nobody serves (a run needs no worker to be terminated); their workflow ids."""
    ids = [f"{workflow_type}-{i}" for i in range(count)]
    for i in range(0, count, 50):
        await asyncio.gather(*(client.start_workflow(workflow_type, id=wf, task_queue="idle")
                               for wf in ids[i:i + 50]))
    return ids


async def _terminations(client: Client, workflow_id: str) -> int:
    events = await client.get_workflow_handle(workflow_id).fetch_history()
    return sum(1 for e in events if e["event_type"] == "WORKFLOW_EXECUTION_TERMINATED")


def _run(kafka: KafkaCluster, prefix: str, tmp_path: Path, count: int, rps: float) -> None:
    init_cluster(kafka.bootstrap, prefix, shards=SHARDS)
    server = ServerProcess(kafka.bootstrap, prefix, tmp_path / "data", tmp_path / "server.log").start()
    server.wait_owning(SHARDS)
    workflow_type = f"Idle{uuid.uuid4().hex[:6]}"
    query = f"WorkflowType = '{workflow_type}' AND ExecutionStatus = 'Running'"

    async def scenario() -> tuple[object, list[int], float, float]:
        client = await Client.connect(server.url)
        began = time.monotonic()
        ids = await _start_runs(client, workflow_type, count)
        while await client.count_workflows(query) < count:
            assert time.monotonic() - began < 120, "the runs did not reach visibility"
            await asyncio.sleep(0.2)
        started = time.monotonic()
        job = await client.start_batch_operation(query, BatchTerminate("cleanup"), job_id=f"job-{workflow_type}",
                                                 rps=rps)
        while (await job.describe()).done < count // 3:  # SIGKILL a third of the way in, then start it again
            assert time.monotonic() - started < 120, "the job made no progress"
            await asyncio.sleep(0.2)
        done_at_kill = (await job.describe()).done
        await asyncio.to_thread(server.kill)
        await asyncio.to_thread(server.start)
        await asyncio.to_thread(server.wait_owning, SHARDS)
        client = await Client.connect(server.url)
        job = client.get_batch_operation_handle(job.job_id)
        described = await asyncio.wait_for(job.result(), 300)
        elapsed = time.monotonic() - started
        counts: list[int] = []
        for i in range(0, count, 50):
            counts += await asyncio.gather(*(_terminations(client, wf) for wf in ids[i:i + 50]))
        print(f"batch terminate of {count} runs at {rps}/s: {elapsed:.1f} s with a kill at {done_at_kill} done; "
              f"{described}")
        return described, counts, elapsed, started - began

    try:
        described, counts, elapsed, _ = asyncio.run(scenario())
    finally:
        server.stop()
    assert (described.state, described.total, described.done, described.failed) == (  # type: ignore[attr-defined]
        "COMPLETED", count, count, 0)
    assert counts == [1] * count, "each run terminated exactly once"
    assert elapsed >= count / rps * 0.9  # held to its rate (durable pauses), restart included
    report = check_history(kafka.bootstrap, prefix, timeout=60)
    assert report.ok, report.problems[:20]


def test_batch_terminate_survives_a_kill(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    _run(kafka, topic_prefix, tmp_path, count=200, rps=100)


@pytest.mark.chaos_full
def test_batch_terminate_survives_a_kill_full(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    _run(kafka, topic_prefix, tmp_path, count=1_000, rps=100)
