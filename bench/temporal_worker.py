"""A Temporal worker for the benchmark, in its own process so its CPU and RSS are measured apart from the generator.

    python -m bench.temporal_worker --address 127.0.0.1:7233 --task-queue bench [--max-concurrent-activities 200]

Defaults are generous and comparable with Ostinato's worker: 1000 cached workflows (both), 200 concurrent
activities (Ostinato defaults to 100; fan-out 100 at concurrency 50 wants more), 100 concurrent workflow tasks
(Temporal's default), and the SDK's default pollers. The default workflow sandbox is kept, as users run it.
Stops cleanly on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from bench.temporal_server import quiet_runtime
from bench.temporal_workflows import ACTIVITIES, WORKFLOWS


async def serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    client = await Client.connect(args.address, runtime=quiet_runtime())
    worker = Worker(client, task_queue=args.task_queue, workflows=WORKFLOWS, activities=ACTIVITIES,
                    max_cached_workflows=args.max_cached_workflows,
                    max_concurrent_activities=args.max_concurrent_activities,
                    max_concurrent_workflow_tasks=args.max_concurrent_workflow_tasks)
    async with worker:
        if args.ready_file:
            # The engine waits for this file: workflows started before the pollers run would count queueing.
            Path(args.ready_file).write_text("ready\n")
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--max-concurrent-activities", type=int, default=200)
    parser.add_argument("--max-concurrent-workflow-tasks", type=int, default=100)
    parser.add_argument("--max-cached-workflows", type=int, default=1000)
    parser.add_argument("--ready-file", default="")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
