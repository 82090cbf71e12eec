"""Activities per second of the Java activity worker beside the Python one (issue 19): the same fan-out workflows,
served by one activity-worker process of each language in turn, on a real broker and a real `ostinato server`.
Prints figures; asserts nothing.

    cd workers/java && mvn -q -B package && cd ../..
    .venv/bin/python workers/java/bench_activities.py [--workflows 10] [--activities 50] [--rounds 3]

Both workers run the same trivial activity (`java_echo`: returns its argument), so the figure is the end-to-end
rate of the engine with that worker (started, completion, workflow task per activity), not of the activity's body.
The workflows run on a Python workflow worker inside this process; each activity worker has a process of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from ostinato import activity, workflow
from ostinato.client import Client
from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.cluster import init_cluster
from ostinato.worker import Worker

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
from tests.tools.servers import ServerProcess  # noqa: E402 - the repository root is on the path only from here

JAVA_CLASSPATH = f"{HERE}/testworker/target/*:{HERE}/testworker/target/lib/*"
SHARDS = 4


@activity.defn(name="java_echo")
async def echo(value: Any) -> Any:
    """The Python twin of TestWorker.java's `java_echo`."""
    return value


python_worker = {"task_queue": "bench-python", "activities": [echo], "max_concurrent_activities": 200}


@workflow.defn
class FanOut:
    @workflow.run
    async def run(self, count: int) -> int:
        results = await asyncio.gather(*(workflow.execute_activity("java_echo", i,
                                                                   start_to_close_timeout=timedelta(seconds=120))
                                         for i in range(count)))
        return len(results)


async def _round(url: str, queue: str, workflows: int, activities: int) -> float:
    """Activities per second over `workflows` fan-outs of `activities` each, after a warm-up run."""
    client = await Client.connect(url)
    try:
        async with Worker(client, task_queue=queue, workflows=[FanOut]):
            await client.execute_workflow(FanOut.run, 10, id=f"warm-{uuid.uuid4().hex[:8]}", task_queue=queue)
            started = time.perf_counter()
            handles = [await client.start_workflow(FanOut.run, activities, id=f"fan-{uuid.uuid4().hex[:8]}",
                                                   task_queue=queue) for _ in range(workflows)]
            done = sum(await asyncio.gather(*(h.result() for h in handles)))
            return done / (time.perf_counter() - started)
    finally:
        await client.close()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), to tell a slow worker from a starved engine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_ready(proc: subprocess.Popen[bytes], log: Path, marker: str) -> None:
    deadline = time.monotonic() + 120
    while marker not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the worker did not start:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=10)
    parser.add_argument("--activities", type=int, default=50, help="activities per workflow")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per worker, alternating")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="ostinato-java-bench-"))
    kafka = KafkaCluster(home / "kafka", nodes=1, port=None).start()
    server = None
    try:
        prefix = f"bench{uuid.uuid4().hex[:8]}"
        init_cluster(kafka.bootstrap, prefix, shards=SHARDS)
        server = ServerProcess(kafka.bootstrap, prefix, home / "data", home / "server.log").start()
        server.wait_owning(SHARDS)
        workers = {
            "java": (["java", "-cp", JAVA_CLASSPATH, "io.ostinato.testworker.TestWorker", server.url, "bench-java",
                      "200"], "ready ", "bench-java", {}),
            "python": ([sys.executable, "-m", "ostinato", "worker", "bench_activities:python_worker", "--server",
                        server.url], "serving", "bench-python", {"PYTHONPATH": f"{HERE}{os.pathsep}{REPO}"}),
        }
        procs = {}
        for name, (argv, ready, _queue, env) in workers.items():
            log = home / f"{name}.log"
            with log.open("ab") as out:
                procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env})
            _wait_ready(procs[name], log, ready)
        try:
            # Rounds alternate between the workers, so neither gets the warmer broker and server.
            figures: dict[str, list[tuple[float, float]]] = {name: [] for name in workers}
            for _ in range(args.rounds):
                for name, (_argv, _ready, queue, _env) in workers.items():
                    before = _cpu_seconds(procs[name].pid)
                    rate = asyncio.run(_round(server.url, queue, args.workflows, args.activities))
                    figures[name].append((rate, _cpu_seconds(procs[name].pid) - before))
        finally:
            for proc in procs.values():
                proc.terminate()
                proc.wait(60)
        total = args.workflows * args.activities
        print(f"{total} activities in {args.workflows} fan-out workflows per round, {SHARDS} shards, one "
              f"activity-worker process each, {os.cpu_count()} cores")
        for name, rounds in figures.items():
            rates = ", ".join(f"{rate:.1f}" for rate, _ in rounds)
            cpu = sum(c for _, c in rounds) / len(rounds)
            print(f"  {name:<7} activities/s by round: {rates}   worker CPU per round {cpu:.1f} s")
    finally:
        if server is not None:
            server.stop()
        kafka.stop()


if __name__ == "__main__":
    main()
