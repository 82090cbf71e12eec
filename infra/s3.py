"""An S3-compatible server on loopback: s3proxy from Maven Central over a plain directory, no Docker.

s3proxy's `jar-with-dependencies` is one self-contained jar; with jclouds' `filesystem-nio2` provider
(plain `filesystem` works too but s3proxy 2.6 logs it as deprecated) buckets are directories under
`home/data` and objects are files. It runs fine as root. Clients use path-style
addressing (`http://127.0.0.1:<port>/<bucket>/<key>`) and the fixed credentials below.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from ostinato.infra import defaults, process
from ostinato.infra.errors import InfraError
from ostinato.infra.kafka import java_executable
from ostinato.infra.maven import fetch_artifact

ACCESS_KEY = "ostinato"
SECRET_KEY = "ostinato-secret"
REGION = "us-east-1"


def s3proxy_version() -> str:
    return os.environ.get("OSTINATO_S3PROXY_VERSION", defaults.S3PROXY_VERSION)


def fetch(version: str | None = None) -> Path:
    """The s3proxy jar (with its dependencies inside) for `version`, downloading it on first use."""
    version = version or s3proxy_version()
    return fetch_artifact(f"org.gaul:s3proxy:{version}:jar:jar-with-dependencies",
                          defaults.cache_dir() / "s3proxy" / version, f"s3proxy {version}")


@dataclass
class Layout:
    """What `server.json` records, so another process can find and stop the server."""

    version: str
    port: int

    @classmethod
    def load(cls, path: Path) -> Layout:
        return cls(**json.loads(path.read_text()))

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")


class S3Server:
    """s3proxy under `home` (properties, `data/` with one directory per bucket, log, pid file).

    `port=None` picks a free port (tests). `access_key`, `secret_key` and `region` are what clients sign with.
    """

    access_key = ACCESS_KEY
    secret_key = SECRET_KEY
    region = REGION

    def __init__(self, home: Path, port: int | None = None, version: str | None = None) -> None:
        self.home = Path(home).absolute()
        layout_file = self.home / "server.json"
        if layout_file.exists():
            self.layout = Layout.load(layout_file)
            if port is not None and port != self.layout.port and self.pid() is None:
                self.layout.port = port
        else:
            self.layout = Layout(version or s3proxy_version(), process.free_ports(1)[0] if port is None else port)
        self._proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def existing(cls, home: Path) -> S3Server | None:
        """The server recorded under `home`, or None."""
        return cls(home) if (Path(home) / "server.json").exists() else None

    @property
    def port(self) -> int:
        return self.layout.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.layout.port}"

    endpoint = url

    @property
    def log_file(self) -> Path:
        return self.home / "s3proxy.log"

    @property
    def _props_file(self) -> Path:
        # Unique to this server and on its command line: the marker that tells its JVM from any other.
        return self.home / "s3proxy.properties"

    def pid(self) -> int | None:
        return process.read_pid(self.home / "pid", str(self._props_file))

    def running(self) -> bool:
        return self._live_pid() is not None

    def _live_pid(self) -> int | None:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc.pid
        return self.pid()

    def status(self) -> dict[str, object]:
        return {"url": self.url, "access_key": self.access_key, "pid": self.pid(), "running": self.running(),
                "data": str(self.home / "data"), "log": str(self.log_file)}

    def _write_properties(self) -> None:
        props = {
            "s3proxy.endpoint": self.url,
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": self.access_key,
            "s3proxy.credential": self.secret_key,
            # boto3 >= 1.36 sends `x-amz-checksum-crc32` (and friends) on every upload; s3proxy 2.6 answers
            # 501 NotImplemented to headers it does not know unless told to ignore them. Ignoring means the
            # checksum is not verified server-side, which is fine on loopback; clients need no special config.
            "s3proxy.ignore-unknown-headers": "true",
            "jclouds.provider": "filesystem-nio2",
            "jclouds.filesystem.basedir": str(self.home / "data"),
            "jclouds.identity": self.access_key,
            "jclouds.credential": self.secret_key,
        }
        body = "".join(f"{k}={v}\n" for k, v in props.items())
        self._props_file.write_text("# Written by ostinato.infra.s3 at every start.\n" + body)

    def start(self, timeout: float = 60.0) -> S3Server:
        """Start the server unless it runs, and wait until it answers HTTP."""
        if self.running():
            self.wait_ready(timeout)
            return self
        java = java_executable()
        jar = fetch(self.layout.version)
        process.check_port_free(self.layout.port, what="s3proxy")
        (self.home / "data").mkdir(parents=True, exist_ok=True)
        self.layout.save(self.home / "server.json")
        self._write_properties()
        heap = os.environ.get("OSTINATO_S3_HEAP", "-Xmx256m")
        argv = [java, heap, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
                "-jar", str(jar), "--properties", str(self._props_file)]
        self._proc = process.spawn(argv, self.log_file, self.home / "pid", cwd=self.home)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until any HTTP answer comes back (an anonymous request is refused with 403: that is ready)."""
        deadline = time.monotonic() + timeout
        while True:
            if self._live_pid() is None:
                raise InfraError(f"s3proxy exited during start-up. Last lines of {self.log_file}:\n"
                                 f"{process.tail(self.log_file)}")
            try:
                with urllib.request.urlopen(self.url + "/", timeout=2):
                    return
            except urllib.error.HTTPError:
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise InfraError(f"s3proxy at {self.url} did not answer within {timeout:.0f}s; see {self.log_file}")
            time.sleep(0.1)

    def stop(self, timeout: float = 15.0) -> list[int]:
        """SIGTERM the JVM, then SIGKILL; returns the pids stopped."""
        pid = self._live_pid()
        if pid is None:
            return []
        process.terminate(pid, str(self._props_file), timeout=timeout)
        (self.home / "pid").unlink(missing_ok=True)
        return [pid]
