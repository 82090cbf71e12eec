"""`WorkflowEnvironment`: workflows and activities in-process on the core's in-memory engine, no Kafka, with
virtual time that jumps ahead whenever nothing is left to do but wait (a 14-day timer takes milliseconds).

    async with await WorkflowEnvironment.start_time_skipping() as env:
        async with Worker(env.client, task_queue="q", workflows=[Order], activities=[charge]):
            result = await env.client.execute_workflow(Order.run, order, id="o-1", task_queue="q")
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ostinato.schemas import wire
from ostinato.sdk import exceptions as exc
from ostinato.sdk._transport import CLOSING_EVENTS, Body, ClientTransport, ServedWorker, WorkerTransport
from ostinato.sdk.activity import ActivityContext, ActivityInfo, set_context
from ostinato.sdk.client import Client
from ostinato.sdk.client import Interceptor as ClientInterceptor
from ostinato.sdk.data import DEFAULT, DataConverter
from ostinato.sdk.search_attributes import SearchAttributeKey
from ostinato.streams.clock import FakeClock
from ostinato.streams.engine import InMemoryEngine
from ostinato.streams.model import from_record
from ostinato.streams.search_attributes import name_problem
from ostinato.streams.update_status import reached, update_status
from ostinato.streams.versioning import QueueVersioning

__all__ = ["ActivityEnvironment", "EngineService", "WorkflowEnvironment"]

Record = dict[str, Any]
IDLE_S = 0.001


class EngineService(ClientTransport):
    """The client's view of an in-memory engine; `worker_transport()` serves its workers. `busy` counts the
    activities they run: time only skips when it is zero and nothing is queued."""

    def __init__(self, engine: InMemoryEngine, *, time_skipping: bool = True) -> None:
        self.engine = engine
        self.time_skipping = time_skipping
        self.workers = EngineWorkers(engine)

    @property
    def busy(self) -> int:
        return self.workers.busy

    def worker_transport(self) -> WorkerTransport:
        return self.workers

    async def send(self, namespace: str, workflow_id: str, run_id: str, body: Body, request_id: str,
                   identity: str) -> Body:
        self.engine.submit(wire.command(namespace, workflow_id, body, run_id=run_id, request_id=request_id,
                                        identity=identity, time_ms=self.engine.clock.now_ms, reply_partition=0))
        self.engine.run_until_idle()
        reply = self.engine.reply(request_id)
        if reply is None:
            raise exc.RPCError(f"no answer to {body[0]}")
        result: Body = reply["body"]
        return result

    async def add_search_attributes(self, namespace: str, attributes: dict[str, str]) -> dict[str, str]:
        """One registry for every namespace of the in-memory engine; once it has any attribute, the engine refuses
        unregistered ones and wrong types as a cluster does."""
        current = dict(self.engine.config.search_attributes or {})
        for name, sa_type in attributes.items():
            if (problem := name_problem(name)) is not None:
                raise exc.RPCError(problem, status=400, code="invalid_argument")
            if current.get(name, sa_type) != sa_type:
                raise exc.RPCError(f"search attribute {name!r} is already registered as {current[name]}",
                                   status=409, code="already_exists")
            current[name] = sa_type
        self.engine.config = replace(self.engine.config, search_attributes=current)
        return current

    async def list_search_attributes(self, namespace: str) -> dict[str, str]:
        return dict(self.engine.config.search_attributes or {})

    async def versioning(self, namespace: str, task_queue: str, change: Record | None) -> Record:
        """Worker versioning in memory: one set of queue builds for every namespace of the engine, routed by the
        core exactly as a cluster routes (streams/versioning.py)."""
        deployments = dict(self.engine.config.deployments or {})
        known = deployments.get(task_queue) or QueueVersioning()
        if change is not None:
            current = change.get("current_build", known.current_build)
            ramping = change.get("ramping_build", known.ramping_build)
            percentage = float(change.get("ramping_percentage", known.ramping_percentage))
            if "current_build" in change and ramping == current:
                ramping, percentage = "", 0.0
            known = deployments[task_queue] = QueueVersioning(current, ramping, percentage if ramping else 0.0,
                                                              known.revision + 1)
            self.engine.config = replace(self.engine.config, deployments=deployments)
        return {"namespace": namespace, "task_queue": task_queue, "current_build": known.current_build,
                "ramping_build": known.ramping_build, "ramping_percentage": known.ramping_percentage,
                "revision": known.revision}

    async def query(self, namespace: str, workflow_id: str, run_id: str, query_type: str, args: list[Record],
                    timeout: timedelta, *, header: Mapping[str, Record] | None = None) -> Body:
        request_id = self.engine.query(namespace, workflow_id, query_type, args, run_id=run_id,
                                       timeout_ms=int(timeout.total_seconds() * 1000), header=header)
        deadline = time.monotonic() + timeout.total_seconds()
        while time.monotonic() < deadline:
            reply = self.engine.reply(request_id)
            if reply is not None:
                answer: Body = reply["body"]
                return answer
            await asyncio.sleep(IDLE_S)
        raise exc.RPCError(f"query {query_type!r} of {workflow_id} got no answer in {timeout}: is a worker running?")

    async def now_ms(self) -> int:
        return self.engine.clock.now_ms

    async def list_schedule_workflows(self, namespace: str, query: str) -> list[str]:
        """Open schedule runs of the namespace, read from the engine's shards (it has no visibility store)."""
        if query:
            raise exc.RPCError("the time-skipping environment lists schedules without a query (no visibility store)")
        return sorted(wf.workflow_id for shard in self.engine.shards for (ns, _), wf in shard.workflows.items()
                      if ns == namespace and (run := wf.current_run()) is not None and run.open
                      and run.schedule is not None)

    async def describe(self, namespace: str, workflow_id: str, run_id: str) -> Record | None:
        return self.engine.describe(namespace, workflow_id, run_id)

    async def history(self, namespace: str, workflow_id: str, run_id: str) -> list[Record]:
        return self.engine.history(namespace, workflow_id, run_id)

    async def poll_update(self, namespace: str, workflow_id: str, run_id: str, update_id: str, wait_stage: str,
                          wait: timedelta) -> Record | None:
        deadline = time.monotonic() + wait.total_seconds()
        while True:
            self.engine.run_until_idle()
            state = self.engine.describe(namespace, workflow_id, run_id)
            if state is None:
                return None
            history = self.engine.history(namespace, workflow_id, state["run_id"])
            status = update_status(from_record(state), update_id,
                                   lambda n: history[n - 1] if n <= len(history) else None)  # noqa: B023
            if status is None or reached(status, wait_stage) or time.monotonic() >= deadline:
                return status
            if self.time_skipping and self.busy == 0 and not self.engine.has_queued_tasks():
                self.engine.skip_time_until_idle()
            await asyncio.sleep(IDLE_S)

    async def wait_closed(self, namespace: str, workflow_id: str, run_id: str) -> Record:
        run_id = run_id or self.engine.current_run_id(namespace, workflow_id)
        if not run_id:
            raise exc.RPCError(f"no workflow {workflow_id!r}", status=404, code="not_found")
        while True:
            self.engine.run_until_idle()
            history = self.engine.history(namespace, workflow_id, run_id)
            if history and history[-1]["event_type"] in CLOSING_EVENTS:
                return history[-1]
            if self.time_skipping and self.busy == 0 and not self.engine.has_queued_tasks():
                self.engine.skip_time_until_idle()
            await asyncio.sleep(IDLE_S)


class EngineWorkers(WorkerTransport):
    """Workers served from an in-memory engine's task queues. `busy` counts the activities they run."""

    def __init__(self, engine: InMemoryEngine) -> None:
        self.engine = engine
        self.busy = 0

    async def run_worker(self, worker: ServedWorker, stopping: asyncio.Event) -> None:
        """Poll the engine's task queues for `worker` until `stopping` is set and its activities are done."""
        engine, queue = self.engine, worker.routed_queue  # a versioned worker reads its build's queue
        running: set[asyncio.Task[None]] = set()
        workflow_tasks: set[asyncio.Task[None]] = set()
        try:
            while not stopping.is_set():
                progressed = False
                if worker.workflow_handler is not None and (task := engine.poll_workflow_task(queue)) is not None:
                    progressed = True
                    self.busy += 1  # time stands still while a task is out (its local activities run in real time)
                    job = asyncio.ensure_future(self._workflow_task(worker, *task))
                    workflow_tasks.add(job)
                    job.add_done_callback(workflow_tasks.discard)
                # At most `max_concurrent_activities` at once, as on a real broker: the rest wait on the queue.
                if worker.activity_executor is not None and len(running) < worker.max_concurrent_activities and \
                        (activity := engine.poll_activity_task(queue)) is not None:
                    progressed = True
                    reply = engine.start_activity(activity, identity=worker.identity)
                    if reply is not None and reply["body"][0] == wire.ACCEPTED:
                        self.busy += 1
                        job = asyncio.ensure_future(self._activity(worker, activity))
                        running.add(job)
                        job.add_done_callback(running.discard)
                if not progressed:
                    await asyncio.sleep(IDLE_S)
        finally:
            await asyncio.gather(*workflow_tasks, return_exceptions=True)
            # Running activities get the graceful shutdown timeout to finish; then they are stopped as a worker
            # shutdown does: each answers a retryable WorkerShutdown failure, so the engine retries it on another
            # worker now rather than after its start-to-close timeout.
            grace = worker.graceful_shutdown_timeout.total_seconds()
            if running and grace > 0:
                await asyncio.wait(set(running), timeout=grace)
            if worker.activity_executor is not None:
                worker.activity_executor.cancel_all()
            await asyncio.gather(*running, return_exceptions=True)

    async def _workflow_task(self, worker: ServedWorker, name: str, task: Record) -> None:
        try:
            await self._answer_workflow_task(worker, name, task)
        finally:
            self.busy -= 1

    async def _answer_workflow_task(self, worker: ServedWorker, name: str, task: Record) -> None:
        assert worker.workflow_handler is not None
        engine = self.engine

        def history() -> list[Record]:
            return engine.history(task["namespace"], task["workflow_id"], task["run_id"])

        if name == wire.QUERY_TASK:
            result, failure = worker.workflow_handler.query(task, history)
            engine.answer_query(task, result, failure)
            return
        command, body = await worker.workflow_handler.handle(task, history)
        engine.respond(task, command, body, worker.identity)

    async def _activity(self, worker: ServedWorker, task: Record) -> None:
        assert worker.activity_executor is not None
        engine = self.engine

        async def heartbeat(task: Record, details: list[Record]) -> bool:
            reply = engine.heartbeat(task, details, identity=worker.identity)
            if reply is None or reply["body"][0] != wire.ACCEPTED:
                return True  # the attempt is over (timed out, completed elsewhere): stop it
            return bool(reply["body"][1]["cancel_requested"])

        try:
            answer = await worker.activity_executor.execute(task, heartbeat)
            if answer is not None:  # None: completed asynchronously, by whoever holds the task token
                engine.respond(task, *answer, worker.identity)
        finally:
            self.busy -= 1


class WorkflowEnvironment:
    """An in-process engine and a client for it; use `async with` (shutdown is idempotent)."""

    def __init__(self, engine: InMemoryEngine, service: EngineService, client: Client) -> None:
        self.engine = engine
        self.service = service
        self.client = client

    @classmethod
    async def start_time_skipping(cls, *, namespace: str = "default", data_converter: DataConverter = DEFAULT,
                                  shards: int = 1, start_time: datetime | None = None,
                                  search_attributes: Sequence[SearchAttributeKey[Any]] | None = None,
                                  interceptors: Sequence[ClientInterceptor] = ()) -> WorkflowEnvironment:
        """An in-memory engine with virtual time. `search_attributes` registers custom attributes (as temporalio's
        `start_local` does): then unregistered ones and wrong types are refused as on a cluster; without it (and
        until `client.add_search_attributes`) nothing is checked. `interceptors` are the client's
        (`Client.connect(interceptors=...)`): workers built from `env.client` use those that are worker
        interceptors too."""
        clock = FakeClock() if start_time is None else FakeClock(int(start_time.timestamp() * 1000))
        engine = InMemoryEngine(shards=shards, clock=clock)
        service = EngineService(engine)
        if search_attributes is not None:
            await service.add_search_attributes(namespace, {
                k.name: k.indexed_value_type.metadata_type for k in search_attributes})
        return cls(engine, service, Client(service, namespace=namespace, data_converter=data_converter,
                                           interceptors=interceptors))

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.engine.clock.now_ms / 1000, UTC)

    async def get_current_time(self) -> datetime:
        """The environment's (virtual) time, as Temporal's `WorkflowEnvironment.get_current_time()`."""
        return self.now()

    @property
    def supports_time_skipping(self) -> bool:
        return self.service.time_skipping

    @contextlib.contextmanager
    def auto_time_skipping_disabled(self) -> Iterator[None]:
        """Waits for results inside the block let real time pass instead of skipping to the next timer."""
        before = self.service.time_skipping
        self.service.time_skipping = False
        try:
            yield
        finally:
            self.service.time_skipping = before

    async def sleep(self, duration: timedelta | float) -> None:
        """Let virtual time pass, firing every timer due in between."""
        seconds = duration.total_seconds() if isinstance(duration, timedelta) else float(duration)
        target = self.engine.clock.now_ms + int(seconds * 1000)
        while self.engine.clock.now_ms < target:
            self.engine.run_until_idle()
            if self.service.busy or self.engine.has_queued_tasks():
                await asyncio.sleep(IDLE_S)  # let workers answer what is due before time moves on
                continue
            now, due = self.engine.clock.now_ms, self.engine.next_deadline_ms
            self.engine.advance(min(target, due) - now if due is not None and due > now else target - now)
        await asyncio.sleep(IDLE_S)

    @classmethod
    async def start_local(cls, *, namespace: str = "default", data_converter: DataConverter = DEFAULT,
                          interceptors: Sequence[ClientInterceptor] = (), shards: int = 1,
                          startup_timeout: timedelta = timedelta(minutes=3)) -> WorkflowEnvironment:
        """A real local engine, for tests that want the real thing: what `ostinato dev` runs (a Kafka broker, an
        initialised cluster, the server), in a temporary directory on free ports, and a client connected to it
        (`env.client`; workers built from it use Kafka). Time is real: nothing skips. `shutdown()` (or leaving
        `async with`) stops everything and deletes its data. With `OSTINATO_KAFKA` set, that broker is used
        instead of starting one (under a topic prefix of the environment's own).

        Raises:
            RuntimeError: Java 17+ or the Kafka jars (`ostinato infra kafka fetch`) are missing, or the engine did
                not start; the message says which and how to fix it.
        """
        local = await LocalEngine.start(shards, startup_timeout)
        try:
            client = await Client.connect(local.url, namespace=namespace, data_converter=data_converter,
                                          interceptors=interceptors)
        except BaseException:
            await local.stop()
            raise
        return LocalEnvironment(local, client)

    async def shutdown(self) -> None:
        pass

    async def __aenter__(self) -> WorkflowEnvironment:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()


class LocalEngine:
    """An `ostinato dev` of the environment's own, driven through the command line (the SDK does not import the
    services): `dev --detach` into a temporary home, `dev stop --wipe` at the end."""

    def __init__(self, home: Path, url: str) -> None:
        self.home = home
        self.url = url

    @classmethod
    async def start(cls, shards: int, timeout: timedelta) -> LocalEngine:
        external = os.environ.get("OSTINATO_KAFKA")
        if not external:
            _check_java()
        home = Path(tempfile.mkdtemp(prefix="ostinato-local-"))
        kafka_port = _free_port(consecutive=2)  # the broker's controller listens on the next port
        api_port = _free_port()
        engine = cls(home, f"http://127.0.0.1:{api_port}")
        argv = [sys.executable, "-m", "ostinato", "dev", "--detach", "--home", str(home), "--port", str(api_port),
                "--kafka-port", str(kafka_port), "--shards", str(shards), "--prefix", f"local{uuid.uuid4().hex[:8]}"]
        try:
            code, output = await _run(argv, timeout)
        except TimeoutError:
            await engine.stop()
            raise RuntimeError(f"WorkflowEnvironment.start_local(): the local engine did not start within "
                               f"{timeout}") from None
        except BaseException:
            await engine.stop()
            raise
        if code != 0:
            await engine.stop()
            hint = "" if external else (" (it needs Java 17+ and Apache Kafka's jars: `ostinato infra kafka fetch` "
                                        "downloads them; or set OSTINATO_KAFKA to a broker of your own)")
            raise RuntimeError(f"WorkflowEnvironment.start_local(): the local engine did not start{hint}:\n"
                               f"{output.strip()}")
        return engine

    async def stop(self) -> None:
        try:
            await _run([sys.executable, "-m", "ostinato", "dev", "stop", "--wipe", "--home", str(self.home)],
                       timedelta(minutes=1))
        finally:
            shutil.rmtree(self.home, ignore_errors=True)


class LocalEnvironment(WorkflowEnvironment):
    """`WorkflowEnvironment.start_local()`: a real engine in real time."""

    def __init__(self, local: LocalEngine, client: Client) -> None:  # no in-memory engine here: no super()
        self.local = local
        self.client = client
        self._stopped = False

    def now(self) -> datetime:
        return datetime.now(UTC)

    @property
    def supports_time_skipping(self) -> bool:
        return False

    @contextlib.contextmanager
    def auto_time_skipping_disabled(self) -> Iterator[None]:
        yield

    async def sleep(self, duration: timedelta | float) -> None:
        await asyncio.sleep(duration.total_seconds() if isinstance(duration, timedelta) else float(duration))

    async def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            await self.client.close()
        finally:
            await self.local.stop()


def _check_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise RuntimeError("WorkflowEnvironment.start_local() runs a real Kafka broker, which needs Java 17+: `java` "
                           "was not found (install a JDK 17+, e.g. `apt-get install -y openjdk-17-jdk-headless`, or "
                           "set JAVA_HOME), or set OSTINATO_KAFKA to a broker of your own. "
                           "WorkflowEnvironment.start_time_skipping() needs neither.")


def _free_port(consecutive: int = 1) -> int:
    """A port (the first of `consecutive` ones) nothing listens on now."""
    for _ in range(100):
        with contextlib.ExitStack() as stack:
            first = stack.enter_context(socket.socket())
            first.bind(("127.0.0.1", 0))
            port: int = first.getsockname()[1]
            try:
                for offset in range(1, consecutive):
                    other = stack.enter_context(socket.socket())
                    other.bind(("127.0.0.1", port + offset))
            except OSError:
                continue
            return port
    raise RuntimeError("no free local ports")


async def _run(argv: list[str], timeout: timedelta) -> tuple[int, str]:
    """Run a command; its exit code and output (stdout and stderr together)."""
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout.total_seconds())
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    return proc.returncode or 0, out.decode(errors="replace")


class ActivityEnvironment:
    """Run one activity function outside any worker, as Temporal's `testing.ActivityEnvironment` does: `info` is
    what `activity.info()` answers, `on_heartbeat` sees every heartbeat's details, `cancel()` asks the running
    activity to stop (an async one is cancelled; a plain function's next `heartbeat()` raises CancelledError),
    `worker_shutdown()` makes `activity.is_worker_shutdown()` true, and `client` is what `activity.client()` gives."""

    def __init__(self, client: Client | None = None) -> None:
        now = datetime.now(UTC)
        self.info = ActivityInfo(
            activity_id="test", activity_type="unknown", attempt=1, namespace="default", workflow_id="test",
            run_id="test-run", workflow_type="test", task_queue="test", scheduled_time=now,
            current_attempt_scheduled_time=now, start_to_close_timeout=timedelta(seconds=1),
            schedule_to_close_timeout=timedelta(seconds=1), heartbeat_timeout=None, heartbeat_details=())
        self.on_heartbeat: Callable[..., None] = lambda *details: None
        self.client = client
        self._cancelled = threading.Event()
        self._shutdown = threading.Event()
        self._task: asyncio.Future[Any] | None = None

    def cancel(self) -> None:
        self._cancelled.set()
        # An async activity's task is cancelled; a plain function's thread cannot be, so its next heartbeat raises
        # CancelledError and `run` raises what the function does (as in Temporal), not asyncio's CancelledError.
        if isinstance(self._task, asyncio.Task) and not self._task.done():
            self._task.cancel()

    def worker_shutdown(self) -> None:
        self._shutdown.set()

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """The activity's result (or its exception), run in a context of its own; a plain function runs in a
        thread, as on a worker."""

        def heartbeat(details: Sequence[Any]) -> None:
            self.on_heartbeat(*details)
            if self._cancelled.is_set() and not inspect.iscoroutinefunction(fn):
                raise exc.CancelledError("activity cancelled")

        context = contextvars.copy_context()
        context.run(set_context, ActivityContext(self.info, heartbeat, self._cancelled.is_set, self._shutdown,
                                                 self.client))
        if inspect.iscoroutinefunction(fn):
            self._task = asyncio.get_running_loop().create_task(fn(*args), context=context)
        else:
            self._task = asyncio.get_running_loop().run_in_executor(None, context.run, fn, *args)
        try:
            return await self._task
        finally:
            self._task = None
