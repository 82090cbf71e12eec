"""A single-node OpenSearch on loopback from Maven Central's integ-test zip, run as an unprivileged user.

The zip (`org.opensearch.distribution.integ-test-zip:opensearch`) has no JDK and no security plugin: plain
HTTP, index/get/bulk/search and aggregations. OpenSearch refuses to run as root, so under root the node runs
as a dedicated system user (`ostinato-search`) through `runuser`. That user cannot enter `/root` (the cache)
nor `/tmp/pytest-of-root` (test homes), both mode 700, so under root the unpacked distribution and the
node's config/data/logs live under `/var/lib/ostinato-opensearch` (root-owned, mode 755; not `/var/tmp`,
whose age-based cleaning could delete half a distribution that still looks complete). `home` keeps what
root writes: `server.json`, the pid file and the console log. Without root everything stays in the cache
and under `home`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ostinato.infra import defaults, process
from ostinato.infra.errors import InfraError
from ostinato.infra.kafka import java_executable, template
from ostinato.infra.maven import fetch_artifact

SEARCH_USER = os.environ.get("OSTINATO_OPENSEARCH_USER", "ostinato-search")
_ROOT_BASE = Path(os.environ.get("OSTINATO_OPENSEARCH_ROOT_DIR", "/var/lib/ostinato-opensearch"))
_COMPLETE = ".complete"


def opensearch_version() -> str:
    return os.environ.get("OSTINATO_OPENSEARCH_VERSION", defaults.OPENSEARCH_VERSION)


def fetch(version: str | None = None) -> Path:
    """The OpenSearch zip for `version` in the cache, downloading it on first use."""
    version = version or opensearch_version()
    return fetch_artifact(f"org.opensearch.distribution.integ-test-zip:opensearch:{version}:zip",
                          defaults.cache_dir() / "opensearch" / version, f"OpenSearch {version}")


def _as_root() -> bool:
    return os.geteuid() == 0


def _root_base() -> Path:
    """`/var/lib/ostinato-opensearch`, made (or checked) root-owned and traversable by the search user."""
    for path in (*reversed(_ROOT_BASE.parents), _ROOT_BASE):
        path.mkdir(mode=0o755, exist_ok=True)
    st = _ROOT_BASE.lstat()
    if _ROOT_BASE.is_symlink() or st.st_uid != 0:
        raise InfraError(f"{_ROOT_BASE} must be a directory owned by root; remove it or set "
                         "OSTINATO_OPENSEARCH_ROOT_DIR to another place")
    _ROOT_BASE.chmod(0o755)
    return _ROOT_BASE


def install(version: str | None = None) -> Path:
    """The unpacked distribution (its `bin/opensearch` is what runs), unpacking the zip once, atomically."""
    version = version or opensearch_version()
    base = (_root_base() / "dist") if _as_root() else (defaults.cache_dir() / "opensearch")
    target = base / version / f"opensearch-{version}"
    if (target / _COMPLETE).exists():
        return target
    archive = fetch(version)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=target.parent))
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                zf.extract(info, staging)
                # zipfile drops Unix modes; restore them so bin/* stays executable, and readable by all.
                mode = (info.external_attr >> 16) & 0o777
                (staging / info.filename).chmod((mode or (0o755 if info.is_dir() else 0o644)) | 0o444
                                                | (0o111 if info.is_dir() else 0))
        top = staging / f"opensearch-{version}"
        (top / _COMPLETE).write_text(f"{archive.name}\n")
        staging.chmod(0o755)
        shutil.rmtree(target, ignore_errors=True)
        top.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def ensure_search_user() -> pwd.struct_passwd:
    """The dedicated system user the node runs as under root, created on first need (idempotent)."""
    try:
        return pwd.getpwnam(SEARCH_USER)
    except KeyError:
        pass
    useradd = process.require_executable("useradd", "Install the `passwd` package, or run as a normal user.")
    proc = subprocess.run([useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                           "--shell", "/usr/sbin/nologin", SEARCH_USER], capture_output=True, text=True)
    if proc.returncode not in (0, 9):  # 9: created meanwhile by a concurrent start
        raise InfraError(f"could not create the user {SEARCH_USER} for OpenSearch: {proc.stderr.strip()}")
    return pwd.getpwnam(SEARCH_USER)


@dataclass
class Layout:
    """What `server.json` records: enough for any process to find, inspect and stop the node."""

    version: str
    port: int
    transport_port: int
    node_dir: str

    @classmethod
    def load(cls, path: Path) -> Layout:
        return cls(**json.loads(path.read_text()))

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")


class OpenSearchServer:
    """One single-node OpenSearch under `home`. `port=None` picks free HTTP and transport ports (tests)."""

    def __init__(self, home: Path, port: int | None = None, version: str | None = None) -> None:
        self.home = Path(home).absolute()
        layout_file = self.home / "server.json"
        if layout_file.exists():
            self.layout = Layout.load(layout_file)
            if port is not None and port != self.layout.port and not self.running():
                self.layout.port, self.layout.transport_port = port, port + 100
        else:
            http, transport = process.free_ports(2) if port is None else (port, port + 100)
            self.layout = Layout(version or opensearch_version(), http, transport, str(self._default_node_dir()))
        self._proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def existing(cls, home: Path) -> OpenSearchServer | None:
        """The node recorded under `home`, or None."""
        return cls(home) if (Path(home) / "server.json").exists() else None

    def _default_node_dir(self) -> Path:
        if not _as_root():
            return self.home / "node"
        digest = hashlib.sha256(str(self.home.resolve()).encode()).hexdigest()[:16]
        return _ROOT_BASE / "nodes" / digest

    @property
    def port(self) -> int:
        return self.layout.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.layout.port}"

    @property
    def node_dir(self) -> Path:
        return Path(self.layout.node_dir)

    @property
    def log_file(self) -> Path:
        return self.home / "opensearch.log"

    @property
    def _marker(self) -> str:
        # Passed on the command line, so runuser, the launcher script and the JVM all carry it: it names this
        # node's processes and no others (a `tail -f` of its files would not contain `-Epath.data=`).
        return f"-Epath.data={self.node_dir / 'data'}"

    def pid(self) -> int | None:
        return process.read_pid(self.home / "pid", self._marker)

    def running(self) -> bool:
        return bool(self._processes())

    def _processes(self) -> list[int]:
        """Every live process of this node, the leader's survivors included."""
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid() and process.pid_alive(int(entry.name),
                                                                                            self._marker):
                found.append(int(entry.name))
        return found

    def status(self) -> dict[str, object]:
        return {"url": self.url, "transport_port": self.layout.transport_port, "pid": self.pid(),
                "running": self.running(), "node_dir": str(self.node_dir), "log": str(self.log_file)}

    # -- lifecycle -----------------------------------------------------------------------------------------

    def _prepare_node_dir(self, dist: Path) -> None:
        conf = self.node_dir / "config"
        for sub in ("config/jvm.options.d", "data", "logs", "tmp"):
            (self.node_dir / sub).mkdir(parents=True, exist_ok=True)
        shutil.copy(dist / "config" / "log4j2.properties", conf / "log4j2.properties")
        jvm = template("opensearch-jvm.options").read_text().replace("@LOGS@", str(self.node_dir / "logs"))
        (conf / "jvm.options").write_text(jvm)
        settings = {
            "cluster.name": "ostinato", "node.name": "ostinato-1", "network.host": "127.0.0.1",
            "http.port": self.layout.port, "transport.port": self.layout.transport_port,
            "discovery.type": "single-node",
            # Small disks (CI, laptops) would otherwise turn indices read-only at 95% full.
            "cluster.routing.allocation.disk.threshold_enabled": "false",
        }
        body = "".join(f"{k}: {v}\n" for k, v in settings.items())
        (conf / "opensearch.yml").write_text("# Written by ostinato.infra.opensearch at every start.\n" + body)
        if _as_root():
            user = ensure_search_user()
            for parent in self.node_dir.parents:
                if parent == _ROOT_BASE.parent:
                    break
                parent.chmod(0o755)
            for path in (self.node_dir, *self.node_dir.rglob("*")):
                os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)

    def start(self, timeout: float = 120.0) -> OpenSearchServer:
        """Start the node unless it runs, and wait until the cluster is yellow or green."""
        if self.running():
            self.wait_ready(timeout)
            return self
        java = java_executable()
        dist = install(self.layout.version)
        for port, what in ((self.layout.port, "OpenSearch HTTP"), (self.layout.transport_port, "OpenSearch transport")):
            process.check_port_free(port, what=what)
        self.home.mkdir(parents=True, exist_ok=True)
        self.layout.save(self.home / "server.json")
        self._prepare_node_dir(dist)
        env = {k: v for k, v in os.environ.items() if k not in ("JAVA_TOOL_OPTIONS", "JAVA_OPTS")}
        env.update({
            "OPENSEARCH_JAVA_HOME": str(Path(java).resolve().parent.parent),
            "OPENSEARCH_PATH_CONF": str(self.node_dir / "config"),
            "OPENSEARCH_TMPDIR": str(self.node_dir / "tmp"),
            "OPENSEARCH_JAVA_OPTS": os.environ.get("OSTINATO_OPENSEARCH_HEAP", "-Xms512m -Xmx512m"),
        })
        argv = [str(dist / "bin" / "opensearch"), self._marker, f"-Epath.logs={self.node_dir / 'logs'}"]
        if _as_root():
            runuser = process.require_executable("runuser", "Install util-linux, or run as a normal user.")
            argv = [runuser, "-u", SEARCH_USER, "--", *argv]
        self._proc = process.spawn(argv, self.log_file, self.home / "pid", env=env, cwd=dist)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until `GET /_cluster/health` says yellow or green; fail fast if the node died."""
        deadline = time.monotonic() + timeout
        url = f"{self.url}/_cluster/health?wait_for_status=yellow&timeout=1s"
        while True:
            # The process this call started says whether the node died; the /proc scan for its marker only when
            # another call started it. A scan can miss a process in the middle of an exec (runuser -> launcher ->
            # JVM), and CI once saw "exited during start-up" with an empty log from a node that had not.
            exited = self._proc.poll() is not None if self._proc is not None else not self.running()
            if exited:
                raise InfraError(f"OpenSearch exited during start-up. Last lines of {self.log_file}:\n"
                                 f"{process.tail(self.log_file)}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if json.load(resp).get("status") in ("yellow", "green"):
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise InfraError(f"OpenSearch at {self.url} was not ready within {timeout:.0f}s; see {self.log_file}")
            time.sleep(0.2)

    def stop(self, timeout: float = 30.0) -> list[int]:
        """SIGTERM every process of the node (runuser, launcher, JVM), then SIGKILL what is left."""
        pids = self._processes()
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            for pid in self._processes():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)  # each process, not a group: the JVM is not the group's leader
            deadline = time.monotonic() + wait
            while self._processes() and time.monotonic() < deadline:
                for pid in pids:
                    process.wait_dead(pid, 0.05)  # reaps the ones we spawned
            if not self._processes():
                break
        for pid in pids:
            process.wait_reaped(pid)
        (self.home / "pid").unlink(missing_ok=True)
        return sorted(pids)

    def wipe(self) -> None:
        """Stop and delete the node's data and logs (also those kept outside `home` under root)."""
        self.stop()
        shutil.rmtree(self.node_dir, ignore_errors=True)
        shutil.rmtree(self.home, ignore_errors=True)
