"""The pre-deploy replay gate (issue 23) against a real broker, server and S3 server: two workflow types run (some
runs closed, some still waiting on a signal), then `ostinato replay ... --from-kafka --sample N --per-type` judges
candidate new code as a CI step would: an incompatible change fails with a per-type report, a compatible one passes,
the sample and `--since` are honoured, and archived runs in S3 are judged the same way.

One server and worker set-up is shared by every test here (module scope); the server is stopped before the gate runs,
since the gate reads only Kafka and S3."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from ostinato.client import Client
from ostinato.connectors.archive import ArchivedRun, S3Archive
from ostinato.exceptions import NondeterminismError
from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas import codec
from ostinato.sdk.blobstore_s3 import s3_client
from ostinato.services.admin.cluster import init_cluster
from ostinato.services.cli.main import app
from ostinato.worker import Replayer, Worker, sample_histories
from tests.conftest import run_cli
from tests.e2e.replay_gate_app import COMPATIBLE, INCOMPATIBLE, Greeter, Waiter, greet, prepare
from tests.tools.servers import ServerProcess

Q = "gate-q"
APP = "tests.e2e.replay_gate_app"
OLD_GREETERS, NEW_GREETERS = 4, 10
OLD_WAITERS, NEW_WAITERS, NEW_SIGNALLED = 2, 10, 6


@dataclass(frozen=True)
class Fleet:
    bootstrap: str
    prefix: str
    since: str  # an ISO time between the old runs and the new ones
    archive: str  # s3:// prefix holding the closed runs' archives
    s3_env: dict[str, str]


async def _settled(client: Client, wf: str) -> None:
    """Wait until an open run has finished its workflow task after the activity: it now waits on the signal."""
    handle = client.get_workflow_handle(wf)
    for _ in range(300):
        history = await handle.fetch_history()
        kinds = [e["event_type"] for e in history]
        if "ACTIVITY_TASK_COMPLETED" in kinds and kinds[-1] == "WORKFLOW_TASK_COMPLETED":
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{wf} did not settle: {kinds}")


async def _run_fleet(url: str, tag: str) -> tuple[str, dict[str, str]]:
    """Old runs, a pause, the `--since` point, new runs; one old open run is signalled after that point."""
    client = await Client.connect(url)
    async with Worker(client, task_queue=Q, workflows=[Greeter, Waiter], activities=[greet, prepare]):
        old = await asyncio.gather(*(client.start_workflow(Greeter.run, f"old{i}", id=f"{tag}-old-g{i}", task_queue=Q)
                                     for i in range(OLD_GREETERS)))
        old_waiters = await asyncio.gather(*(client.start_workflow(Waiter.run, i, id=f"{tag}-old-w{i}", task_queue=Q)
                                             for i in range(OLD_WAITERS)))
        await asyncio.gather(*(h.result() for h in old), *(_settled(client, h.id) for h in old_waiters))
        await asyncio.sleep(1.5)
        since = datetime.now(UTC).isoformat()
        await asyncio.sleep(0.5)
        greeters = await asyncio.gather(*(client.start_workflow(Greeter.run, f"n{i}", id=f"{tag}-g{i}", task_queue=Q)
                                          for i in range(NEW_GREETERS)))
        waiters = await asyncio.gather(*(client.start_workflow(Waiter.run, i, id=f"{tag}-w{i}", task_queue=Q)
                                         for i in range(NEW_WAITERS)))
        await asyncio.gather(*(_settled(client, h.id) for h in waiters))
        signalled = [*waiters[:NEW_SIGNALLED], old_waiters[0]]  # the old one: begun before --since, closed after
        await asyncio.gather(*(handle.signal(Waiter.finish) for handle in signalled))
        await asyncio.gather(*(h.result() for h in [*greeters, *signalled]))
        await asyncio.gather(*(_settled(client, h.id) for h in [*waiters[NEW_SIGNALLED:], old_waiters[1]]))
    return since, {h.id: h.run_id or "" for h in [*old, *greeters, *signalled]}


def _archive_closed(server: ServerProcess, store: S3Archive, closed: dict[str, str]) -> None:
    """Archive every closed run as the archiver does (`S3Archive.write` of the owner's history records)."""
    import base64

    for wf, run_id in closed.items():
        status, page = server.get(f"/api/v1/namespaces/default/workflows/{wf}/history?format=avro&page_size=1000")
        assert status == 200, page
        events = [codec.decode(base64.b64decode(e))[1] for e in page["events"]]
        kind = "Greeter" if "-g" in wf else "Waiter"
        store.write(ArchivedRun("default", wf, run_id, kind, "COMPLETED", events[-1]["event_time_ms"], events))


@pytest.fixture(scope="module")
def fleet(kafka: KafkaCluster, s3: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    home = tmp_path_factory.mktemp("gate")
    s3_env = {"OSTINATO_S3_ENDPOINT": s3.url, "OSTINATO_S3_ACCESS_KEY": s3.access_key,
              "OSTINATO_S3_SECRET_KEY": s3.secret_key}
    init_cluster(kafka.bootstrap, prefix, shards=2)
    server = ServerProcess(kafka.bootstrap, prefix, home / "data", home / "server.log").start()
    uri = f"s3://gate-{prefix}/closed"
    boto = s3_client(s3.url, s3.access_key, s3.secret_key)
    boto.create_bucket(Bucket=f"gate-{prefix}")
    try:
        server.wait_owning(2)
        since, closed = asyncio.run(asyncio.wait_for(_run_fleet(server.url, prefix), 120))
        _archive_closed(server, S3Archive.from_uri(boto, uri), closed)
    finally:
        server.stop()
    yield Fleet(kafka.bootstrap, prefix, since, uri, {**os.environ, **s3_env})


def _gate(fleet: Fleet, code: str, *args: str, source: str = "kafka") -> tuple[int, dict[str, Any]]:
    """The command in this process (a child process per call would cost seconds of imports each): `_table` runs it
    as a user does."""
    where = (["--from-kafka", "--kafka", fleet.bootstrap, "--prefix", fleet.prefix] if source == "kafka"
             else ["--archive", fleet.archive])
    done = CliRunner().invoke(app, ["replay", f"{APP}:{code}", *where, *args, "--json"], env=fleet.s3_env)
    assert done.exit_code in (0, 1), done.output
    return done.exit_code, json.loads(done.stdout)


def _counts(report: dict[str, Any], kind: str) -> tuple[int, int, int, int]:
    t = report["types"][kind]
    return t["replayed"], t["passed"], t["failed"], t["skipped"]


GREETERS = OLD_GREETERS + NEW_GREETERS
WAITERS = OLD_WAITERS + NEW_WAITERS
OPEN_WAITERS = NEW_WAITERS - NEW_SIGNALLED + 1


def test_an_incompatible_change_fails_the_gate_with_a_per_type_report(fleet: Fleet) -> None:
    rc, report = _gate(fleet, "INCOMPATIBLE", "--sample", "1000", "--per-type")
    assert rc == 1 and not report["ok"]
    assert _counts(report, "Greeter") == (GREETERS, 0, GREETERS, 0)
    assert _counts(report, "Waiter") == (WAITERS, WAITERS, 0, 0)
    assert report["types"]["Waiter"]["open_runs"] == OPEN_WAITERS
    first = report["types"]["Greeter"]["first_failure"]
    assert first["history"].startswith(f"default/{fleet.prefix}-") and "NondeterminismError" in first["error"]
    # The table a person reads in the CI log, from `ostinato` as CI runs it: the failing runs, one line each, and a
    # row per type.
    table = run_cli("replay", f"{APP}:INCOMPATIBLE", "--from-kafka", "--kafka", fleet.bootstrap, "--prefix",
                    fleet.prefix, "--sample", "2", "--per-type", env={**fleet.s3_env, "COLUMNS": "300"})
    assert table.returncode == 1, table.stdout + table.stderr
    assert table.stdout.count("non-deterministic default/") == 2 and "Greeter" in table.stdout
    assert "4 histories replayed, 2 non-deterministic" in table.stdout


def test_a_compatible_change_passes_and_the_sample_is_per_type(fleet: Fleet) -> None:
    rc, report = _gate(fleet, "COMPATIBLE", "--sample", "1000", "--per-type")
    assert rc == 0 and report["ok"] and report["failed"] == 0
    assert _counts(report, "Greeter") == (GREETERS, GREETERS, 0, 0)
    assert _counts(report, "Waiter") == (WAITERS, WAITERS, 0, 0)
    rc, three = _gate(fleet, "COMPATIBLE", "--sample", "3", "--per-type")
    assert rc == 0 and three["replayed"] == 6 and three["considered"] == GREETERS + WAITERS
    assert three["plan"] == {"sample": 3, "per_type": True, "since_ms": None, "workflow_types": []}
    assert _counts(three, "Greeter") == (3, 3, 0, 0) and _counts(three, "Waiter") == (3, 3, 0, 0)
    rc, overall = _gate(fleet, "REPLAYER", "--sample", "3", "--workflow-type", "Waiter")
    assert rc == 0 and list(overall["types"]) == ["Waiter"] and overall["replayed"] == 3


def test_since_leaves_out_older_runs_but_completes_a_run_begun_before_it(fleet: Fleet) -> None:
    rc, report = _gate(fleet, "INCOMPATIBLE", "--sample", "1000", "--per-type", "--since", fleet.since)
    assert rc == 1
    assert _counts(report, "Greeter") == (NEW_GREETERS, 0, NEW_GREETERS, 0)
    # The new Waiters, and the old one signalled after --since: its start was read from before the window.
    assert _counts(report, "Waiter") == (NEW_WAITERS + 1, NEW_WAITERS + 1, 0, 0)
    assert report["unreadable"] == {}
    # Sought by timestamp: the runs with nothing after --since (the old Greeters, the old Waiter never signalled)
    # were not even read.
    assert report["considered"] == NEW_GREETERS + NEW_WAITERS + 1


def test_removed_types_fail_only_with_open_runs(fleet: Fleet) -> None:
    rc, report = _gate(fleet, "WAITER_REMOVED", "--sample", "1000", "--per-type")
    assert rc == 1
    assert _counts(report, "Waiter") == (OPEN_WAITERS, 0, OPEN_WAITERS, WAITERS - OPEN_WAITERS)
    assert "removed" in report["types"]["Waiter"]["first_failure"]["error"]
    rc, report = _gate(fleet, "GREETER_REMOVED", "--sample", "1000", "--per-type")
    assert rc == 0 and _counts(report, "Greeter") == (0, 0, 0, GREETERS)


def test_archived_runs_in_s3_are_sampled_and_judged(fleet: Fleet) -> None:
    rc, report = _gate(fleet, "INCOMPATIBLE", "--sample", "5", "--per-type", source="archive")
    assert rc == 1
    assert _counts(report, "Greeter") == (5, 0, 5, 0)
    assert _counts(report, "Waiter") == (5, 5, 0, 0)
    assert report["types"]["Greeter"]["first_failure"]["history"].startswith(f"{fleet.archive}/")
    rc, report = _gate(fleet, "COMPATIBLE", "--since", fleet.since, source="archive")
    assert rc == 0 and _counts(report, "Greeter") == (NEW_GREETERS, NEW_GREETERS, 0, 0)


def test_the_sdk_samples_histories_for_a_replayer_in_ci(fleet: Fleet) -> None:
    """`ostinato.worker.sample_histories` gives a user's own CI test what the gate replays, for Temporal's API."""
    histories = sample_histories(fleet.bootstrap, prefix=fleet.prefix, sample=3, per_type=True)
    assert len(histories) == 6 and all(h.run_id and h.workflow_id.startswith(fleet.prefix) for h in histories)

    async def failures(code: list[type]) -> dict[str, Exception]:
        results = await Replayer(workflows=code).replay_workflows(histories, raise_on_replay_failure=False)
        return results.replay_failures

    assert asyncio.run(failures(COMPATIBLE)) == {}
    failed = asyncio.run(failures(INCOMPATIBLE))
    assert len(failed) == 3 and all(isinstance(e, NondeterminismError) for e in failed.values())
    since = datetime.fromisoformat(fleet.since)
    recent = sample_histories(fleet.bootstrap, prefix=fleet.prefix, since=since, workflow_types=["Greeter"])
    assert len(recent) == NEW_GREETERS


def test_usage_and_connection_errors_exit_2() -> None:
    def gate(*args: str) -> Result:
        return CliRunner().invoke(app, ["replay", f"{APP}:COMPATIBLE", "--from-kafka", *args])

    bad = gate("--per-type")
    assert bad.exit_code == 2 and "--per-type needs --sample" in bad.output
    since = gate("--since", "last week")
    assert since.exit_code == 2 and "neither an age" in since.output
    down = gate("--kafka", "127.0.0.1:1", "--timeout", "2")
    assert down.exit_code == 2 and "cannot read the history" in down.output, down.output
