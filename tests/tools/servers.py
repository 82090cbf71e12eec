"""`ostinato server` as a child process, for tests that kill, stop and restart it like an operator (or a crash)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ostinato.infra.process import free_ports


class ServerProcess:
    def __init__(self, bootstrap: str, prefix: str, data_dir: Path, log: Path, *, port: int | None = None,
                 env: dict[str, str] | None = None, processor: bool = True, extra_args: tuple[str, ...] = ()) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.data_dir = data_dir
        self.log = log
        self.port = port or free_ports(1)[0]
        self.env = env or {}
        self.processor = processor
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_ms = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, env: dict[str, str] | None = None) -> ServerProcess:
        argv = [sys.executable, "-m", "ostinato", "server", "--kafka", self.bootstrap, "--prefix", self.prefix,
                "--port", str(self.port), "--data-dir", str(self.data_dir)]
        if not self.processor:
            argv.append("--no-processor")
        argv.extend(self.extra_args)
        merged = {**os.environ, **self.env, **(env or {})}
        self.started_ms = int(time.time() * 1000)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=merged)
        return self

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def wait_owning(self, shards: int | None = None, timeout: float = 60.0) -> list[int]:
        """Wait until the API answers and (if given) this process owns `shards` shards per the cluster topic,
        announced since it started (a restarted server on the same port must not count its predecessor's claims)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                status, body = self.get("/api/v1/cluster/owners", timeout=2)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
                continue
            mine = sorted(o["shard"] for o in body["owners"]
                          if o["read_endpoint"] == self.url and o["updated_at_ms"] >= self.started_ms)
            if status == 200 and (shards is None or len(mine) >= shards):
                return mine
            time.sleep(0.2)
        raise TimeoutError(f"server on {self.url} did not own {shards} shards in {timeout:.0f}s; log:\n{self.tail()}")

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"server exited with {self.proc.returncode}; log:\n{self.tail()}")

    def wait_exit(self, timeout: float = 120.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


@contextlib.contextmanager
def two_servers(bootstrap: str, prefix: str, home: Path, **options: Any) -> Iterator[tuple[ServerProcess, ...]]:
    """Two servers of one cluster (data dirs and logs under `home`), each owning at least one shard."""
    servers = tuple(ServerProcess(bootstrap, prefix, home / name, home / f"{name}.log", **options).start()
                    for name in ("a", "b"))
    try:
        for server in servers:
            server.wait_owning(1)
        yield servers
    finally:
        for server in servers:
            server.stop()
