"""Java activity workers (workers/java, issue 19) serving Python workflows on a real broker and a real `ostinato
server`: a result, retries after an ApplicationFailure (at the delay it asks for), a non-retryable failure,
heartbeats that keep an attempt alive and carry its progress to the retry, cancellation, a graceful shutdown that
hands the running attempt back at once, and a Java worker killed with SIGKILL mid-attempt whose activity a Python
worker finishes after the heartbeat timeout. Only the wire contract joins the two languages.

The Java worker is built with Maven (`.ci/run` builds it first; a stale or missing build is rebuilt here). Without
Java or Maven these tests fail: they are never skipped.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ostinato import RetryPolicy, activity, workflow
from ostinato.client import Client
from ostinato.exceptions import ActivityError, ApplicationError, CancelledError
from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.cluster import init_cluster
from ostinato.worker import Worker
from tests.conftest import REPO
from tests.tools.servers import ServerProcess

JAVA_DIR = REPO / "workers" / "java"
TEST_WORKER = JAVA_DIR / "testworker" / "target"
MAIN = "io.ostinato.testworker.TestWorker"
CONFORMANCE = REPO / "schemas" / "conformance"
JAVA_IDENTITY = "java-test-worker"  # what TestWorker.java calls itself in history
SHARDS = 4
QUEUE = "java-activities"
SCENARIO_TIMEOUT_S = 180.0  # a bound on a hung scenario, never a measurement
T = TypeVar("T")


# -- the Python side: workflows that call activities only the Java worker serves -------------------------------------

@workflow.defn
class ChargeInJava:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> Any:
        return await workflow.execute_activity("java_charge", order, start_to_close_timeout=timedelta(seconds=30))


@workflow.defn
class FlakyInJava:
    @workflow.run
    async def run(self, order: str) -> Any:
        # The policy's own backoff is ten minutes: only the delay the Java failure asks for lets this end in time.
        return await workflow.execute_activity("java_flaky", order, start_to_close_timeout=timedelta(seconds=30),
                                               retry_policy=RetryPolicy(initial_interval=timedelta(minutes=10)))


@workflow.defn
class DeclinedInJava:
    @workflow.run
    async def run(self, order: str) -> dict[str, Any]:
        try:
            await workflow.execute_activity("java_decline", order, start_to_close_timeout=timedelta(seconds=30),
                                            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100)))
        except ActivityError as err:
            cause = err.cause
            return {"retry_state": err.retry_state, "cause": type(cause).__name__,
                    "type": getattr(cause, "type", None), "message": getattr(cause, "message", None),
                    "non_retryable": getattr(cause, "non_retryable", None),
                    "details": list(getattr(cause, "details", ()))}
        return {"retry_state": "completed?"}


@workflow.defn
class ProgressInJava:
    @workflow.run
    async def run(self, steps: int) -> Any:
        # Each attempt runs longer than the heartbeat timeout: only heartbeats keep it alive, and a second
        # attempt is the last one allowed.
        return await workflow.execute_activity(
            "java_progress", steps, start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=2),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=2))


@workflow.defn
class SlotsInJava:
    @workflow.run
    async def run(self, count: int) -> list[Any]:
        # One attempt each, four seconds from its start, served one at a time (1.5 s each): the last would run out
        # of time if a worker with one slot started every task it fetched and let them wait for the slot.
        return list(await asyncio.gather(*(
            workflow.execute_activity("java_sleep", 1500, start_to_close_timeout=timedelta(seconds=4),
                                      retry_policy=RetryPolicy(maximum_attempts=1))
            for _ in range(count))))


@workflow.defn
class CancelInJava:
    def __init__(self) -> None:
        self.stop = False

    @workflow.signal
    def stop_it(self) -> None:
        self.stop = True

    @workflow.run
    async def run(self, markers: str) -> str:
        running = workflow.start_activity(
            "java_wait_cancel", markers, start_to_close_timeout=timedelta(seconds=120),
            heartbeat_timeout=timedelta(seconds=2),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED)
        await workflow.wait_condition(lambda: self.stop)
        running.cancel()
        try:
            await running
        except ActivityError as err:  # as in Temporal: cancelled is an ActivityError caused by CancelledError
            return "cancelled" if isinstance(err.cause, CancelledError) else f"failed: {err.cause!r}"
        return "completed"


@workflow.defn
class HangInJava:
    @workflow.run
    async def run(self, markers: str, heartbeat_timeout_s: float) -> Any:
        # Ten minutes to close: only a heartbeat timeout (kill -9) or a hand-back (shutdown) ends attempt 1 sooner.
        return await workflow.execute_activity(
            "java_hang", markers, start_to_close_timeout=timedelta(minutes=10),
            heartbeat_timeout=timedelta(seconds=heartbeat_timeout_s) if heartbeat_timeout_s else None,
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200)))


@activity.defn(name="java_hang")
async def python_takes_over(markers: str) -> str:
    """The same activity type in Python: whoever serves the queue after the Java worker is gone finishes it."""
    return f"finished by python on attempt {activity.info().attempt}"


# -- the Java side --------------------------------------------------------------------------------------------------

def _newest_source() -> float:
    sources = [p for p in JAVA_DIR.rglob("*") if p.suffix in (".java", ".xml") and "target" not in p.parts]
    sources += list((REPO / "schemas" / "avro").iterdir())
    return max(p.stat().st_mtime for p in sources)


@pytest.fixture(scope="session")
def java_classpath() -> str:
    """The test worker's class path, built with `mvn -q -B package` unless the build is newer than every source."""
    java, mvn = shutil.which("java"), shutil.which("mvn")
    if java is None or mvn is None:
        pytest.fail("the Java worker tests need a JDK 17+ and Maven on PATH (`.ci/run` installs both); "
                    f"found java={java}, mvn={mvn}")
    jars = list(TEST_WORKER.glob("ostinato-worker-testworker-*.jar"))
    if not jars or min(j.stat().st_mtime for j in jars) < _newest_source():
        build = subprocess.run([mvn, "-q", "-B", "package"], cwd=JAVA_DIR, capture_output=True, text=True,
                               timeout=1200)
        if build.returncode != 0:
            pytest.fail(f"mvn package in {JAVA_DIR} failed ({build.returncode}):\n{build.stdout}\n{build.stderr}")
    return f"{TEST_WORKER}/*:{TEST_WORKER}/lib/*"


class JavaWorker:
    """`TestWorker.java` in a process of its own, started like any user's worker: a server URL and a queue."""

    def __init__(self, classpath: str, server_url: str, queue: str, log: Path, max_concurrent: int = 100) -> None:
        self.argv = ["java", "-cp", classpath, MAIN, server_url, queue, str(max_concurrent)]
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120.0) -> JavaWorker:
        """Start it and wait for its `ready` line (printed once it has subscribed to the queue)."""
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while "ready " not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Java worker did not start ({self.proc.returncode}):\n{self.tail()}")
            time.sleep(0.1)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="module")
def server(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One cluster (its own prefix) and one real `ostinato server` for the module."""
    prefix = f"tjava{uuid.uuid4().hex[:10]}"
    home = tmp_path_factory.mktemp("java-server")
    init_cluster(kafka.bootstrap, prefix, shards=SHARDS)
    srv = ServerProcess(kafka.bootstrap, prefix, home / "data", home / "server.log").start()
    try:
        srv.wait_owning(SHARDS)
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def java_worker(server: ServerProcess, java_classpath: str,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaWorker]:
    """The module's Java worker on QUEUE (tests that kill or stop theirs start their own, on their own queue)."""
    worker = JavaWorker(java_classpath, server.url, QUEUE, tmp_path_factory.mktemp("java") / "worker.log").start()
    try:
        yield worker
    finally:
        worker.stop()


def _run(scenario: Callable[[Client], Awaitable[T]], server_url: str) -> T:
    async def main() -> T:
        client = await Client.connect(server_url)
        try:
            return await scenario(client)
        finally:
            await client.close()

    return asyncio.run(asyncio.wait_for(main(), SCENARIO_TIMEOUT_S))


async def _workflow(client: Client, workflow_class: type, *args: Any, workflow_id: str = "") -> tuple[Any, Any]:
    """Run a workflow to its result with a Python worker serving only workflows; (result, history)."""
    async with Worker(client, task_queue=QUEUE, workflows=[workflow_class]):
        handle = await client.start_workflow(workflow_class, *args, id=workflow_id or f"java-{uuid.uuid4().hex[:10]}",
                                             task_queue=QUEUE)
        result = await handle.result()
        return result, await handle.fetch_history()


async def _marker(path: Path) -> str:
    """Wait for a marker file a Java activity writes (atomically) once it is running."""
    while not path.exists():
        await asyncio.sleep(0.1)
    return path.read_text()


def _events(history: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e["attributes"][1] for e in history if e["event_type"] == kind]


# -- the tests ------------------------------------------------------------------------------------------------------

def test_a_python_workflow_gets_the_result_of_a_java_activity(server: ServerProcess, java_worker: JavaWorker) -> None:
    order = {"order": "o-1", "amount": 42.5, "markers": ""}
    workflow_id = f"java-charge-{uuid.uuid4().hex[:8]}"
    result, history = _run(lambda c: _workflow(c, ChargeInJava, order, workflow_id=workflow_id), server.url)
    # Typed input, a JSON result and the attempt's info, as the Java activity saw them.
    assert result == {"order": "o-1", "charged": 42.5, "by": "java", "attempt": 1, "activity_type": "java_charge",
                      "workflow_id": workflow_id, "deadline_after_start": True}
    [started] = _events(history, "ACTIVITY_TASK_STARTED")
    [completed] = _events(history, "ACTIVITY_TASK_COMPLETED")
    assert started["identity"] == JAVA_IDENTITY and completed["identity"] == JAVA_IDENTITY
    assert completed["result"][0]["metadata"]["encoding"] == b"json/plain"


def test_an_application_failure_is_retried_after_the_delay_it_asks_for(server: ServerProcess,
                                                                      java_worker: JavaWorker) -> None:
    result, history = _run(lambda c: _workflow(c, FlakyInJava, "o-2"), server.url)
    assert result == "o-2 ok on attempt 3"
    [started] = _events(history, "ACTIVITY_TASK_STARTED")
    assert started["attempt"] == 3
    last = started["last_failure"]
    assert (last["type"], last["source"], last["next_retry_delay_ms"]) == ("GatewayBusy", "ostinato-java", 100)
    assert last["message"] == "gateway busy on attempt 2"


def test_a_non_retryable_failure_ends_the_activity_at_once(server: ServerProcess, java_worker: JavaWorker) -> None:
    result, history = _run(lambda c: _workflow(c, DeclinedInJava, "o-3"), server.url)
    assert result == {"retry_state": "NON_RETRYABLE_FAILURE", "cause": ApplicationError.__name__,
                      "type": "CardDeclined", "message": "card declined on attempt 1", "non_retryable": True,
                      "details": ["o-3", 402]}
    [failed] = _events(history, "ACTIVITY_TASK_FAILED")
    assert failed["identity"] == JAVA_IDENTITY and failed["failure"]["source"] == "ostinato-java"


def test_heartbeats_keep_an_attempt_alive_and_its_retry_resumes_from_them(server: ServerProcess,
                                                                         java_worker: JavaWorker) -> None:
    result, history = _run(lambda c: _workflow(c, ProgressInJava, 35), server.url)
    # Attempt 1 reported steps 1..3 and failed; attempt 2 started from its last details and ran 32 more steps
    # (3.2 s, past the 2 s heartbeat timeout) on heartbeats alone.
    assert result == {"resumed_from": 3, "attempt": 2, "steps": 35}
    [started] = _events(history, "ACTIVITY_TASK_STARTED")
    assert started["attempt"] == 2 and started["last_failure"]["type"] == "Flaky"


def test_a_workflow_cancels_a_running_java_activity(server: ServerProcess, java_worker: JavaWorker,
                                                    tmp_path: Path) -> None:
    async def scenario(client: Client) -> tuple[Any, Any]:
        async with Worker(client, task_queue=QUEUE, workflows=[CancelInJava]):
            workflow_id = f"java-cancel-{uuid.uuid4().hex[:8]}"
            handle = await client.start_workflow(CancelInJava.run, str(tmp_path), id=workflow_id, task_queue=QUEUE)
            await _marker(tmp_path / f"{workflow_id}.started")
            await handle.signal(CancelInJava.stop_it)
            result = await handle.result()
            return result, await handle.fetch_history()

    result, history = _run(scenario, server.url)
    assert result == "cancelled"
    [canceled] = _events(history, "ACTIVITY_TASK_CANCELED")
    # The Java activity saw the request in a heartbeat's answer and answered Canceled with its last details.
    assert canceled["identity"] == JAVA_IDENTITY
    assert canceled["details"][0]["metadata"]["encoding"] == b"json/plain"
    assert int(canceled["details"][0]["data"]) >= 1


def test_a_full_java_worker_leaves_tasks_in_kafka_until_a_slot_frees(server: ServerProcess, java_classpath: str,
                                                                     tmp_path: Path) -> None:
    queue = f"java-slots-{uuid.uuid4().hex[:6]}"
    java = JavaWorker(java_classpath, server.url, queue, tmp_path / "java.log", max_concurrent=1).start()
    try:
        async def scenario(client: Client) -> Any:
            async with Worker(client, task_queue=queue, workflows=[SlotsInJava]):
                return await client.execute_workflow(SlotsInJava.run, 3, id=f"java-slots-{uuid.uuid4().hex[:8]}",
                                                     task_queue=queue)

        assert _run(scenario, server.url) == [1, 1, 1]
    finally:
        java.stop()


def _hand_over(server: ServerProcess, classpath: str, tmp_path: Path, heartbeat_timeout_s: float,
               stop_java: Callable[[JavaWorker], None]) -> tuple[str, list[dict[str, Any]], JavaWorker]:
    """Run HangInJava on a queue of its own, served by a Java worker until `stop_java` ends it, then by a
    Python worker serving the same activity type; the workflow's result and history."""
    queue = f"java-handover-{uuid.uuid4().hex[:6]}"
    java = JavaWorker(classpath, server.url, queue, tmp_path / "java.log").start()
    try:
        async def scenario(client: Client) -> tuple[str, list[dict[str, Any]]]:
            async with Worker(client, task_queue=queue, workflows=[HangInJava]):
                workflow_id = f"java-hang-{uuid.uuid4().hex[:8]}"
                handle = await client.start_workflow(HangInJava.run, str(tmp_path), heartbeat_timeout_s,
                                                     id=workflow_id, task_queue=queue)
                pid = await _marker(tmp_path / f"{workflow_id}.pid")
                assert int(pid) == java.pid, "attempt 1 must run in the Java worker"
                await asyncio.to_thread(stop_java, java)
                async with Worker(client, task_queue=queue, activities=[python_takes_over],
                                  identity="python-takes-over"):
                    result = await handle.result()
                return result, await handle.fetch_history()

        result, history = _run(scenario, server.url)
    finally:
        java.stop()
    return result, history, java


def test_a_java_worker_killed_mid_activity_is_finished_by_a_python_worker(server: ServerProcess,
                                                                          java_classpath: str,
                                                                          tmp_path: Path) -> None:
    def kill(java: JavaWorker) -> None:
        os.kill(java.pid, signal.SIGKILL)
        assert java.proc is not None
        java.proc.wait(30)

    result, history, java = _hand_over(server, java_classpath, tmp_path, 2.0, kill)
    assert java.proc is not None and java.proc.returncode == -signal.SIGKILL
    assert result == "finished by python on attempt 2"
    [started] = _events(history, "ACTIVITY_TASK_STARTED")
    [completed] = _events(history, "ACTIVITY_TASK_COMPLETED")
    assert started["attempt"] == 2 and completed["identity"] == "python-takes-over"
    # Attempt 1 died with its process: the engine ended it for want of heartbeats.
    assert started["last_failure"]["kind"] == "TIMEOUT" and started["last_failure"]["timeout_type"] == "HEARTBEAT"


def test_a_java_worker_shutting_down_hands_its_running_activity_back(server: ServerProcess, java_classpath: str,
                                                                     tmp_path: Path) -> None:
    def terminate(java: JavaWorker) -> None:
        assert java.proc is not None
        java.proc.send_signal(signal.SIGTERM)
        java.proc.wait(120)

    # No heartbeat timeout and ten minutes to close: only the hand-back lets attempt 2 run within the test.
    result, history, java = _hand_over(server, java_classpath, tmp_path, 0, terminate)
    assert result == "finished by python on attempt 2"
    [started] = _events(history, "ACTIVITY_TASK_STARTED")
    assert started["attempt"] == 2
    last = started["last_failure"]
    assert (last["type"], last["source"], last["non_retryable"]) == ("WorkerShutdown", "ostinato-java", False)
    assert f"closed {JAVA_IDENTITY}" in java.tail(), "the Java worker's close() must have returned"


# -- the conformance kit (schemas/conformance): the same fixtures, both workers ------------------------------------

def _conformance_driver() -> Any:
    """schemas/conformance/driver.py, loaded from its file: a tool beside the schemas, not part of the package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("conformance_driver", CONFORMANCE / "driver.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("language", ["java", "python"])
def test_both_workers_pass_the_conformance_kit(kafka: KafkaCluster, java_classpath: str, tmp_path: Path,
                                               language: str) -> None:
    argv = {
        "java": ["java", "-cp", java_classpath, MAIN, "{server}", "{queue}"],
        "python": [sys.executable, "-m", "ostinato", "worker", "python_worker:worker", "--server", "{server}"],
    }[language]
    path = os.pathsep.join(p for p in (str(CONFORMANCE), str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    report = _conformance_driver().run(kafka.bootstrap, argv, tmp_path / "worker.log", env={"PYTHONPATH": path})
    failed = {name: problems for name, problems in report.items() if problems}
    log = (tmp_path / "worker.log").read_text(errors="replace")[-4000:]
    assert len(report) >= 10 and not failed, f"{language} worker:\n{failed}\n{log}"
