"""An SDK worker of the chaos workload in its own process, so a test can kill -9 it like a crashed machine.

Run as `python -m tests.tools.chaos_worker --server URL --queue Q --ledger DIR --name NAME`; `WorkerProcess`
starts, kills and stops it. Activities append to the ledger under DIR; the worker's HTTP exchanges (history
fetches) that fail or answer 5xx go to `DIR/<NAME>.http`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """One chaos worker process serving `queue` through the server at `server` (for history fetches)."""

    def __init__(self, name: str, server: str, queue: str, ledger: Path, log: Path) -> None:
        self.name, self.server, self.queue, self.ledger, self.log = name, server, queue, ledger, log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def http_log(self) -> Path:
        return self.ledger / f"{self.name}.http"

    def start(self) -> WorkerProcess:
        argv = [sys.executable, "-m", "tests.tools.chaos_worker", "--server", self.server, "--queue", self.queue,
                "--ledger", str(self.ledger), "--name", self.name]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(30)

    def stop(self, timeout: float = 40.0) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


async def _serve(server: str, queue: str, ledger: Path, name: str) -> None:
    from ostinato.worker import Worker
    from tests.tools.chaos_programs import ACTIVITIES, LEDGER_ENV, WORKFLOWS
    from tests.tools.http_counter import HttpTally, connect_counted

    os.environ[LEDGER_ENV] = f"{ledger}:{name}"
    tally = HttpTally(log=ledger / f"{name}.http")
    client = await connect_counted(server, tally, identity=name, timeout=120)
    worker = Worker(client, task_queue=queue, workflows=WORKFLOWS, activities=ACTIVITIES, identity=name,
                    max_concurrent_activities=200)
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    loop.add_signal_handler(signal.SIGINT, stopping.set)
    async with worker:
        logging.getLogger("chaos-worker").info("%s serving %s via %s", name, queue, server)
        await stopping.wait()
    await client.service.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--server", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--ledger", required=True, type=Path)
    parser.add_argument("--name", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.Formatter.converter = time.gmtime
    asyncio.run(_serve(args.server, args.queue, args.ledger, args.name))


if __name__ == "__main__":
    main()
