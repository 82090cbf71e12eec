"""One history processor in a process of its own: `ostinato server --processors N --processor-mode process` starts
N of these (`services/history/processes.py`) and relays owner reads to them (`services/frontend/relay.py`).

Deciding is Python and holds the interpreter: in one process, N processor threads, the gateway, thousands of
result long-polls and the visibility feeder take turns on one GIL, and a batch waits for the interpreter while the
timers it should fire grow late (docs/benchmarks.md, "Why S4's timers are late"). A process per processor gives
each its own interpreter. A shard's store and its long-poll waiters stay together in the process that commits to
it, so the owner reads (describe, history, pending, result) are served here, on a Unix socket only the server can
reach, over one WebSocket the server multiplexes them on (`services/frontend/read_channel.py`); the server in
front keeps authentication, commands, visibility, archival and `/metrics`.

The process ends when its parent does (PR_SET_PDEATHSIG on Linux): a server killed with SIGKILL leaves no
orphan processor committing for shards nobody serves reads of, exactly as a processor thread dies with its
process. It exits non-zero when its processor fails, and the server then exits too.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import json
import logging
import os
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from ostinato.schemas import codec
from ostinato.services.admin.cluster import read_settings
from ostinato.services.admin.ownership import OwnershipTable
from ostinato.services.frontend import read_channel
from ostinato.services.frontend.api import install_owner_reads
from ostinato.services.frontend.namespaces_api import config_for as namespace_config
from ostinato.services.frontend.reads import ReadContext, add_routes
from ostinato.services.frontend.schedules_api import install_owner_reads as install_schedule_reads
from ostinato.services.history.priority import renice
from ostinato.services.history.processes import MemberSpec
from ostinato.services.history.processor import Processor, ProcessorOptions
from ostinato.services.history.waiters import HistoryWaiters

_PR_SET_PDEATHSIG = 1
STOP_TIMEOUT_S = 30.0
log = logging.getLogger("ostinato.processor_process")


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the server's process ends (Linux); exit now if it already has."""
    libc_name = ctypes.util.find_library("c")
    if sys.platform.startswith("linux") and libc_name:
        ctypes.CDLL(libc_name, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def serve(spec: MemberSpec) -> int:
    """Run the processor and its owner-read server until SIGTERM; the exit status (1 if the processor failed)."""
    settings = read_settings(spec.bootstrap, spec.prefix, timeout=60.0)
    if settings is None:
        log.error("no Ostinato cluster %r at %s", spec.prefix, spec.bootstrap)
        return 1
    ownership = OwnershipTable(spec.bootstrap, spec.prefix).start()
    ownership.caught_up.wait(30)  # namespaces' retention must be known before any shard restores
    options = ProcessorOptions.from_env(Path(spec.data_dir), spec.read_endpoint)
    options.owner_id = spec.owner_id
    if spec.archive:
        options.config = replace(options.config, archive=True)
    options.config_for = namespace_config(ownership, options.config)
    waiters = HistoryWaiters()
    options.on_history = waiters.notify
    options.on_release = waiters.release
    registry = CollectorRegistry()  # the processor's own metrics; the server merges every process's into /metrics
    proc = Processor(spec.bootstrap, settings, options, registry=registry)
    failed = threading.Event()

    def run() -> None:
        try:
            proc.run()
        except BaseException:
            log.exception("the history processor %s stopped with an error", proc.owner_id)
            failed.set()
            os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=run, name="ostinato-processor", daemon=True)
    app = web.Application()
    add_routes(app, ReadContext(settings.shards, proc, ownership, {proc.owner_id}, waiters))
    install_owner_reads(app)
    install_schedule_reads(app)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(app: web.Application) -> None:
        waiters.bind(asyncio.get_running_loop())
        thread.start()

    async def stop(app: web.Application) -> None:
        """Finish the open transaction and leave the group first, so the shards move at once."""
        proc.stop()
        await asyncio.get_running_loop().run_in_executor(None, thread.join, STOP_TIMEOUT_S)

    app.router.add_get("/metrics", metrics)
    app.router.add_get(read_channel.PATH, read_channel.serve)  # the server relays every owner read over this
    app.on_startup.append(start)
    app.on_shutdown.append(stop)
    try:
        web.run_app(app, path=spec.socket, print=None, access_log=None, shutdown_timeout=2.0)
    finally:
        proc.stop()
        if thread.is_alive():
            thread.join(STOP_TIMEOUT_S)
        ownership.stop()
    return 1 if failed.is_set() else 0


def main(argv: list[str]) -> None:
    spec = MemberSpec(**json.loads(argv[1]))
    die_with_parent(spec.parent_pid)
    codec.settings_from_environment(os.environ)
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s %(levelname)s processor-{spec.index} %(name)s: %(message)s")
    for problem in renice(spec.nice):  # before any thread starts: they inherit the nice value
        log.warning("--processor-nice not applied: %s", problem)
    raise SystemExit(serve(spec))


if __name__ == "__main__":
    main(sys.argv)
