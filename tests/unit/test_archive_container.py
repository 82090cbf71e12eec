"""The archive file format: a real run's history written as an Avro object container file and read back, both by
our reader and by plain fastavro, with no Ostinato code involved on the reading side."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path
from typing import Any

import fastavro
import pytest

from ostinato.connectors.archive import (
    ArchivedRun,
    ArchiveError,
    archive_key,
    index_key,
    read_container,
    write_container,
)
from ostinato.schemas import codec
from ostinato.sdk import activity, workflow
from ostinato.sdk.common import RetryPolicy
from ostinato.sdk.exceptions import ActivityError, ApplicationError
from ostinato.sdk.testing import WorkflowEnvironment
from ostinato.sdk.worker import Worker

Q = "archive-unit"


@activity.defn
async def flaky(n: int) -> str:
    if n < 0:
        raise ApplicationError("negative", non_retryable=True)
    return "x" * n


@workflow.defn
class Mixed:
    @workflow.run
    async def run(self, n: int) -> str:
        out = await workflow.execute_activity(flaky, n, start_to_close_timeout=timedelta(seconds=5))
        await workflow.sleep(timedelta(seconds=3))
        try:
            await workflow.execute_activity(flaky, -1, start_to_close_timeout=timedelta(seconds=5),
                                            retry_policy=RetryPolicy(maximum_attempts=2))
        except ActivityError:
            out += "!"
        return out


async def _history() -> tuple[str, list[dict[str, Any]]]:
    env = await WorkflowEnvironment.start_time_skipping()
    async with env, Worker(env.client, task_queue=Q, workflows=[Mixed], activities=[flaky]):
        handle = await env.client.start_workflow(Mixed.run, 5, id="wf/with slash", task_queue=Q)
        assert await handle.result() == "xxxxx!"
        run_id = handle.first_execution_run_id or handle.run_id or ""
        return run_id, await env.client.service.history("default", "wf/with slash", run_id)


@pytest.fixture(scope="module")
def run() -> ArchivedRun:
    import asyncio

    run_id, events = asyncio.run(_history())
    # What the owner's store holds: single-object records; decode them as the archiver does.
    events = [codec.decode(codec.encode("ostinato.history.HistoryEvent", e))[1] for e in events]
    return ArchivedRun("default", "wf/with slash", run_id, "Mixed", "COMPLETED", 1_780_000_000_000, events)


def test_round_trip_gives_exactly_the_events(run: ArchivedRun) -> None:
    back = read_container(write_container(run))
    assert back == run
    assert len(run.events) > 10


def test_plain_fastavro_reads_the_file_without_ostinato(run: ArchivedRun) -> None:
    reader = fastavro.reader(io.BytesIO(write_container(run)))
    plain = list(reader)
    assert [e["event_id"] for e in plain] == list(range(1, len(run.events) + 1))  # type: ignore[index]
    assert [e["event_type"] for e in plain] == [e["event_type"] for e in run.events]  # type: ignore[index]
    assert reader.codec == "deflate"
    assert reader.metadata["ostinato.run_id"] == run.run_id
    # The writer schema travels in the file: the first event's attributes are the start record, by field name.
    assert plain[0]["attributes"]["workflow_type"] == "Mixed"  # type: ignore[index,call-overload]


def test_same_run_gives_the_same_bytes(run: ArchivedRun) -> None:
    assert write_container(run) == write_container(run)


def test_garbage_is_a_clear_error() -> None:
    with pytest.raises(ArchiveError, match="not an Ostinato history archive"):
        read_container(b"Obj\x01 nonsense")


def test_keys_split_cleanly_whatever_the_ids() -> None:
    key = archive_key("ns", "a/b c", "r/1", 1_780_000_000_000, prefix="arch/")
    assert key == "arch/ns/2026/05/28/a%2Fb%20c/r%2F1.avro"
    assert index_key("ns", "a/b", "r", "p/") == "p/_index/ns/a%2Fb/r.json"


def test_replayer_replays_an_archive_file(run: ArchivedRun, tmp_path: Path) -> None:
    from ostinato.sdk.replayer import Replayer

    path = tmp_path / "run.avro"
    path.write_bytes(write_container(run))
    assert Replayer(workflows=[Mixed]).replay_file(path).ok

    @workflow.defn(name="Mixed")
    class Changed:  # the same type name, different commands: the archive catches it
        @workflow.run
        async def run(self, n: int) -> str:
            await workflow.sleep(timedelta(seconds=1))
            return ""

    result = Replayer(workflows=[Changed]).replay_archive(path.read_bytes())
    assert not result.ok and "NondeterminismError" in type(result.failure).__name__


def test_replayer_says_what_is_wrong_with_a_bad_archive(tmp_path: Path) -> None:
    from ostinato.sdk.replayer import Replayer

    path = tmp_path / "bad.avro"
    path.write_bytes(b"not avro at all")
    with pytest.raises(ValueError, match="not an Ostinato history archive"):
        Replayer(workflows=[Mixed]).replay_file(path)
