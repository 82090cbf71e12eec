"""Processors in processes of their own (`ostinato server --processors N --processor-mode process`).

The members, owner ids and transactional ids are those of processor threads (`processors.py`): processor 0 keeps
the data directory's owner id, processor i > 0 is `<owner id>-<i>`, so switching modes keeps every member's
identity and a restart fences its own crashed incarnation at once. Only where deciding runs changes: each process
has its own interpreter (`services/processor_process.py` says why).

The server starts them from its main thread (a child's PR_SET_PDEATHSIG follows the thread that started it),
relays reads to their Unix sockets in a private temporary directory, and ends with them: a process that exits
while the server is not stopping takes the server down (`on_failure`), as a processor thread that dies does.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ostinato.services.history.processor import ProcessorOptions, owner_id_of

log = logging.getLogger("ostinato.processes")
MODULE = "ostinato.services.processor_process"  # the processes' entry point (it may import the API; this may not)


@dataclass(frozen=True)
class MemberSpec:
    """What the server tells a processor process (one JSON argument; settings from the environment it inherits)."""

    bootstrap: str
    prefix: str
    data_dir: str
    owner_id: str
    read_endpoint: str  # the server's: other servers redirect reads there, and it relays them on
    socket: str  # the Unix socket the process serves owner reads on
    archive: bool
    parent_pid: int
    index: int
    nice: int = 0  # added to the process's nice value and its session's autogroup at start (`priority.py`)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", MODULE, json.dumps(asdict(self))]


class ProcessorProcesses:
    def __init__(self, bootstrap: str, prefix: str, options: ProcessorOptions, count: int,
                 archive: bool = False, nice: int = 0) -> None:
        if count < 1:
            raise ValueError(f"a server runs at least one processor, not {count}")
        base = options.owner_id or owner_id_of(options.data_dir / prefix)
        self.options = options
        self.owner_ids = tuple(base if i == 0 else f"{base}-{i}" for i in range(count))
        self._bootstrap, self._prefix, self._archive, self._nice = bootstrap, prefix, archive, nice
        self._dir = Path(tempfile.mkdtemp(prefix="ostinato-"))  # 0700; short enough for a socket path
        self.sockets = {owner: str(self._dir / f"processor-{i}.sock") for i, owner in enumerate(self.owner_ids)}
        self._children: list[subprocess.Popen[bytes]] = []
        self._stopping = threading.Event()

    def start(self, on_failure: Callable[[str, int], None]) -> None:
        """Start every process; `on_failure(owner id, exit status)` runs on a watcher thread if one ends while
        the server is not stopping."""
        for i, owner in enumerate(self.owner_ids):
            spec = MemberSpec(bootstrap=self._bootstrap, prefix=self._prefix, data_dir=str(self.options.data_dir),
                              owner_id=owner, read_endpoint=self.options.read_endpoint, socket=self.sockets[owner],
                              archive=self._archive, parent_pid=os.getpid(), index=i, nice=self._nice)
            # Their own session: a Ctrl-C or a group signal reaches the server, which stops them in order (after
            # `_stopping` is set), instead of each ending on its own and looking like a failure.
            child = subprocess.Popen(spec.argv(), start_new_session=True)
            self._children.append(child)
            threading.Thread(target=self._watch, args=(owner, child, on_failure), name=f"ostinato-watch-{i}",
                             daemon=True).start()

    def _watch(self, owner: str, child: subprocess.Popen[bytes], on_failure: Callable[[str, int], None]) -> None:
        status = child.wait()
        if not self._stopping.is_set():
            on_failure(owner, status)

    def wait_listening(self, timeout_s: float) -> bool:
        """Until every process serves its socket (False after `timeout_s` or when one has ended already)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(child.poll() is not None for child in self._children):
                return False
            if all(Path(path).exists() for path in self.sockets.values()):
                return True
            time.sleep(0.05)
        return False

    def stop(self, timeout_s: float) -> None:
        """SIGTERM every process, which finishes its open transaction and leaves the group, so its shards move
        at once; SIGKILL one that has not ended after `timeout_s`."""
        self._stopping.set()
        for child in self._children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for child in self._children:
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("processor process %d did not stop in %.0fs; killing it", child.pid, timeout_s)
                child.kill()
                child.wait()
        shutil.rmtree(self._dir, ignore_errors=True)
