"""The Temporal CLI dev server for the side-by-side benchmark: built once into the cache, run as a child process.

`go install ...@v1.5.1` is the last CLI tag installable that way (later tags use a `replace` directive). The
binary lands in `<cache>/temporal/v1.5.1/temporal`, shared by every checkout; `OSTINATO_TEMPORAL_BIN` points at
an existing binary instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ostinato.infra.defaults import cache_dir
from ostinato.infra.process import free_ports, pid_alive, tail, terminate

TEMPORAL_CLI_VERSION = "v1.5.1"
TEMPORAL_CLI_PACKAGE = "github.com/temporalio/cli/cmd/temporal"


def temporal_binary() -> Path:
    """The `temporal` CLI: `OSTINATO_TEMPORAL_BIN`, else the cached build, else build it now (minutes, once)."""
    if env := os.environ.get("OSTINATO_TEMPORAL_BIN"):
        path = Path(env).expanduser()
        if not path.is_file():
            raise RuntimeError(f"OSTINATO_TEMPORAL_BIN={env} is not a file")
        return path
    target_dir = cache_dir() / "temporal" / TEMPORAL_CLI_VERSION
    binary = target_dir / "temporal"
    if binary.is_file():
        return binary
    target_dir.parent.mkdir(parents=True, exist_ok=True)
    # A lock, so two benchmarks started together build once; the loser finds the binary after waiting.
    with open(target_dir.parent / f"{TEMPORAL_CLI_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.is_file():
            _build(target_dir)
    return binary


def _build(target_dir: Path) -> None:
    """`go install` into a temporary directory, then rename: a half-built binary is never found in the cache."""
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("`go` is not on PATH: install Go, or set OSTINATO_TEMPORAL_BIN to a temporal binary")
    print(f"building Temporal CLI {TEMPORAL_CLI_VERSION} (first run only, several minutes)...", file=sys.stderr,
          flush=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{TEMPORAL_CLI_VERSION}-", dir=target_dir.parent))
    try:
        env = {**os.environ, "GOBIN": str(tmp)}
        started = time.monotonic()
        done = subprocess.run([go, "install", f"{TEMPORAL_CLI_PACKAGE}@{TEMPORAL_CLI_VERSION}"], env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"go install failed ({done.returncode}):\n{done.stderr[-4000:]}")
        if target_dir.exists():  # left by hand or by an older layout, without a binary (checked under the lock)
            shutil.rmtree(target_dir)
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared by every checkout
        tmp.rename(target_dir)
        print(f"built {target_dir / 'temporal'} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class TemporalDevServer:
    """`temporal server start-dev`, headless, on free ports: in-memory SQLite unless `db_file` is given."""

    def __init__(self, home: Path, db_file: Path | None = None) -> None:
        self.home = home
        self.db_file = db_file
        self.log_file = home / "temporal-server.log"
        self.port, self.http_port, self.metrics_port = free_ports(3)
        self.address = f"127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("the Temporal dev server is not started")
        return self._proc.pid

    async def start(self, timeout: float = 120.0) -> None:
        """Start the server and wait until a client can connect (a busy 2-core machine takes a while)."""
        binary = await asyncio.to_thread(temporal_binary)
        self.home.mkdir(parents=True, exist_ok=True)
        argv = [str(binary), "server", "start-dev", "--headless", "--ip", "127.0.0.1",
                "--port", str(self.port), "--http-port", str(self.http_port),
                "--metrics-port", str(self.metrics_port),
                "--log-level", "warn",  # start-dev's default, said out loud: info logs would cost server CPU
                # Every awaited result is a long-poll; the default cap (1,200 per namespace) fails S4's thousands
                # in flight with "namespace concurrent poller limit exceeded". A production cluster raises it too.
                "--dynamic-config-value", "frontend.namespaceCount=100000"]
        if self.db_file is not None:
            argv += ["--db-filename", str(self.db_file)]
        with open(self.log_file, "ab") as log:
            # Own session, so a Ctrl-C of the benchmark reaches us first and `stop` decides what happens.
            self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
        await self._wait_ready(timeout)

    async def _wait_ready(self, timeout: float) -> None:
        from temporalio.client import Client  # the bench extra; keep importing this module cheap

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"temporal dev server exited ({self._proc.returncode}):\n{tail(self.log_file)}")
            try:
                client = await Client.connect(self.address)
                await client.service_client.check_health()
                return
            except Exception as exc:  # noqa: BLE001 - not up yet: any connection error means "retry"
                last = exc
                await asyncio.sleep(0.5)
        self.stop()
        raise RuntimeError(f"temporal dev server not reachable at {self.address} after {timeout:.0f} s: {last!r}\n"
                           f"{tail(self.log_file)}")

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL after 15 s, and reap it: nothing is left behind."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if pid_alive(proc.pid):
            terminate(proc.pid, "temporal", timeout=15.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)


def quiet_runtime() -> Any:
    """A temporalio runtime whose Rust core logs errors only: under S4's thousands of results its retry warnings
    would otherwise flood the benchmark's stdout (a retried call that finally fails is counted as a failure)."""
    from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

    return Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(
        filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))))
