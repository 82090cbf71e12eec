"""Child processes that outlive their parent: pid files, liveness, clean termination, ports."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from ostinato.infra.errors import InfraError


def require_executable(name: str, hint: str) -> str:
    """Return the path of `name` on PATH or fail with an install hint."""
    path = shutil.which(name)
    if path is None:
        raise InfraError(f"`{name}` was not found on PATH. {hint}")
    return path


def check_port_free(port: int, host: str = "127.0.0.1", what: str = "") -> None:
    """Fail clearly when something already listens on host:port (binding would fail later, obscurely)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            label = f" (wanted for {what})" if what else ""
            raise InfraError(
                f"port {port} on {host} is already in use{label}. Stop whatever listens there "
                f"(`ss -ltnp 'sport = :{port}'` shows it) or choose another port."
            ) from None


def free_ports(count: int, host: str = "127.0.0.1", consecutive: bool = False) -> list[int]:
    """Ports free right now, drawn below the kernel's ephemeral range.

    Ports handed out by the kernel for port 0 come from the ephemeral range, where an outgoing connection can
    take one before our server binds it; 20000-32767 sits below Linux's default range. `consecutive` asks for
    a run of ports (a broker uses port and port + 1).
    """
    rng = random.Random()
    for _ in range(200):
        if consecutive:
            base = rng.randrange(20000, 32768 - count)
            candidates = list(range(base, base + count))
        else:
            candidates = rng.sample(range(20000, 32768), count)
        socks = []
        try:
            for port in candidates:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(sock)
                sock.bind((host, port))
            return candidates
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise InfraError(f"could not find {count} free ports on {host}")


def spawn(argv: Sequence[str], log_file: Path, pid_file: Path, env: dict[str, str] | None = None,
          cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start a detached process (own session, so Ctrl-C in a terminal does not reach it) and record its pid."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=env, cwd=cwd,
        )
    write_pid_file(pid_file, proc.pid)
    return proc


def start_time(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def write_pid_file(pid_file: Path, pid: int) -> None:
    """Record a pid with its start time: together they name one process, even after the pid is reused."""
    pid_file.write_text(f"{pid} {start_time(pid) or 0}\n")


def read_pid(pid_file: Path, marker: str) -> int | None:
    """The live pid recorded in `pid_file`, if it is still the same process.

    A pid alone can name someone else after a reboot or a wrap-around; the recorded start time must match and
    the command line must still contain `marker`.
    """
    try:
        pid_text, _, started_text = pid_file.read_text().strip().partition(" ")
        pid, started = int(pid_text), int(started_text or 0)
    except (FileNotFoundError, ValueError):
        return None
    if started and start_time(pid) != started:
        return None
    return pid if pid_alive(pid, marker) else None


def pid_alive(pid: int, marker: str | None = None) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":  # a zombie has exited; its parent has not reaped it yet
        return False
    return marker is None or marker in cmdline


def terminate(pid: int, marker: str, timeout: float = 30.0) -> bool:
    """SIGTERM the process group, wait, then SIGKILL. Returns True if something was stopped."""
    if not pid_alive(pid, marker):
        return False
    signal_group(pid, signal.SIGTERM)
    if not wait_dead(pid, timeout):
        signal_group(pid, signal.SIGKILL)
        wait_dead(pid, 10.0)
    wait_reaped(pid)
    return True


def kill(pid: int) -> None:
    """SIGKILL, as a crash would: no clean shutdown."""
    signal_group(pid, signal.SIGKILL)
    wait_dead(pid, 10.0)


def wait_reaped(pid: int, timeout: float = 5.0) -> None:
    """Wait until a dead process has left the process table.

    A detached child is re-parented to init, which reaps it a moment later; until then `ps` still lists it
    as `<defunct>`. Waiting here means "stopped" really leaves nothing behind when the command returns.
    """
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)


def wait_dead(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap our own children so they do not linger as zombies
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


def signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
