"""Apache Kafka in KRaft mode on loopback, from Maven Central jars: one combined node or three.

A cluster lives in a home directory (`cluster.json`, one `node-<id>/` per node with its properties, data, log
and pid file), so another process can find, inspect and stop it. Nothing here needs Docker.

With `sasl=True` the client listener speaks SASL_PLAINTEXT instead of PLAINTEXT (SCRAM-SHA-512 and SCRAM-SHA-256),
with ACLs enforced (`StandardAuthorizer`, nothing allowed without an ACL) and one super user, `admin`, whose random
password and client settings are in `<home>/admin.properties` (mode 0600; `--kafka-config` takes the file as it
is). Its SCRAM credential is written into the metadata when the storage is formatted, so it works from the first
start; brokers talk to each other as `admin` over SCRAM, and to the controllers over SASL PLAIN (KRaft controllers
cannot check SCRAM: the credentials live in the metadata they serve). Other users and ACLs are made through the
Admin API as `admin` (`ostinato acl user-set`, `ostinato acl grant`).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from ostinato.infra import defaults, process
from ostinato.infra.errors import InfraError
from ostinato.infra.maven import fetch_classpath

_MAIN = "kafka.Kafka"
ADMIN_USER = "admin"  # the super user of a SASL cluster
_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
_JAVA_HINT = "Install a JDK 17+ (Debian: `apt-get install -y openjdk-17-jdk-headless`) or set JAVA_HOME."


def template(name: str) -> Path:
    """A file of infra/templates, as a real path (mvn and the JVM need one)."""
    with resources.as_file(resources.files("ostinato.infra") / "templates" / name) as path:
        return Path(path)


def kafka_version() -> str:
    return os.environ.get("OSTINATO_KAFKA_VERSION", defaults.KAFKA_VERSION)


def fetch(version: str | None = None) -> Path:
    """The directory of Kafka's runtime jars for `version`, downloading them on first use."""
    version = version or kafka_version()
    target = defaults.cache_dir() / "kafka" / version / "libs"
    return fetch_classpath(
        template("kafka-pom.xml"), target,
        {"kafka.version": version, "log4j.version": defaults.LOG4J_VERSION},
        label=f"Apache Kafka {version}",
    )


@functools.cache
def _java_version_text(java: str) -> str:
    return subprocess.run([java, "-version"], capture_output=True, text=True).stderr


def class_data_archive(libs: Path, java: str) -> Path:
    """Where the broker's class-data-sharing archive for this classpath and this JVM lives.

    Loading Kafka's classes from an archive instead of 40-odd jars cuts a broker's start-up by about a third.
    The JVM's own version line is part of the name: an archive only fits the JVM that wrote it.
    """
    version = _java_version_text(java)
    digest = hashlib.sha256(f"{Path(java).resolve()}\n{version}".encode()).hexdigest()[:12]
    return libs.parent / f"broker-{digest}.jsa"


def java_executable() -> str:
    """`$JAVA_HOME/bin/java` or `java` on PATH, checked to be Java 17 or newer (Kafka 4 needs it)."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise InfraError(f"`java` was not found. {_JAVA_HINT}")
    out = _java_version_text(java)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):  # "1.8.0" style
        major = int(match.group(2))
    if major < 17:
        raise InfraError(f"Kafka 4 needs Java 17 or newer; {java} is {major or 'unknown'}. {_JAVA_HINT}")
    return java


@dataclass(frozen=True)
class Node:
    node_id: int
    port: int
    controller_port: int


@dataclass
class Layout:
    """What `cluster.json` records: enough for any process to find and stop the cluster."""

    nodes: list[Node]
    cluster_id: str
    version: str
    extra_config: dict[str, str] = field(default_factory=dict)
    sasl: bool = False  # SASL_PLAINTEXT (SCRAM) with ACLs instead of PLAINTEXT; the admin's password is not here

    @classmethod
    def load(cls, path: Path) -> Layout:
        raw = json.loads(path.read_text())
        return cls(
            nodes=[Node(**n) for n in raw["nodes"]], cluster_id=raw["cluster_id"], version=raw["version"],
            extra_config=raw.get("extra_config", {}), sasl=raw.get("sasl", False),
        )

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")


def new_cluster_id() -> str:
    """Kafka's Uuid text form (URL-safe base64 of 16 random bytes), without a JVM round trip.

    Like Kafka's own `Uuid.randomUuid`, never one that starts with `-`: command-line tools take it for an option.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


class KafkaCluster:
    """A local KRaft cluster of combined broker+controller nodes under `home`.

    `port=None` picks free ports (tests); otherwise node i listens on `port + i` and its controller on
    `controller_port + i` (default `port + 1` for one node, `port + 100` for several). `sasl` (fixed when the
    storage is formatted; None: as recorded, else PLAINTEXT) puts SCRAM and ACLs on the client listener.
    """

    def __init__(
        self,
        home: Path,
        nodes: int = 1,
        port: int | None = defaults.KAFKA_PORT,
        controller_port: int | None = None,
        version: str | None = None,
        extra_config: Mapping[str, str] | None = None,
        sasl: bool | None = None,
    ) -> None:
        self.home = Path(home)
        layout_file = self.home / "cluster.json"
        if layout_file.exists():
            self.layout = Layout.load(layout_file)
            if len(self.layout.nodes) != nodes:
                raise InfraError(
                    f"{self.home} holds a {len(self.layout.nodes)}-node cluster, not {nodes}; "
                    "use another directory or wipe this one."
                )
            if sasl is not None and sasl != self.layout.sasl:
                raise InfraError(
                    f"{self.home} holds a cluster {'with' if self.layout.sasl else 'without'} SASL; its storage was "
                    "formatted that way: use another directory or wipe this one."
                )
            if port is not None and self.layout.nodes[0].port != port and not self._any_alive():
                self.layout.nodes = self._plan_nodes(nodes, port, controller_port)
            if extra_config:
                self.layout.extra_config = dict(extra_config)
        else:
            self.layout = Layout(
                nodes=self._plan_nodes(nodes, port, controller_port), cluster_id=new_cluster_id(),
                version=version or kafka_version(), extra_config=dict(extra_config or {}), sasl=bool(sasl),
            )
        self._procs: dict[int, subprocess.Popen[bytes]] = {}  # nodes this object started (exit is then certain)

    @classmethod
    def existing(cls, home: Path) -> KafkaCluster | None:
        """The cluster recorded under `home`, or None when there is none."""
        layout_file = Path(home) / "cluster.json"
        if not layout_file.exists():
            return None
        return cls(home, nodes=len(Layout.load(layout_file).nodes), port=None)

    @staticmethod
    def _plan_nodes(count: int, port: int | None, controller_port: int | None) -> list[Node]:
        if port is None:
            ports = process.free_ports(2 * count)
            return [Node(i + 1, ports[2 * i], ports[2 * i + 1]) for i in range(count)]
        base_controller = controller_port or (port + 1 if count == 1 else port + 100)
        return [Node(i + 1, port + i, base_controller + i) for i in range(count)]

    @property
    def nodes(self) -> list[Node]:
        return list(self.layout.nodes)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.layout.nodes)

    @property
    def admin_properties(self) -> Path:
        """The super user's client settings of a SASL cluster (librdkafka names; `--kafka-config` reads them)."""
        return self.home / "admin.properties"

    def admin_security(self) -> dict[str, str]:
        """librdkafka security settings of the super user (empty for a PLAINTEXT cluster), its password made on
        first use."""
        if not self.layout.sasl:
            return {}
        path = self.admin_properties
        if not path.exists():
            self.home.mkdir(parents=True, exist_ok=True)
            body = (f"# The super user of the SASL cluster under {self.home}; keep this file private.\n"
                    "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                    f"sasl.username={ADMIN_USER}\nsasl.password={secrets.token_urlsafe(24)}\n")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(body)
        settings = {}
        for line in path.read_text().splitlines():
            name, sep, value = line.partition("=")
            if sep and not name.startswith("#"):
                settings[name.strip()] = value.strip()
        return settings

    def node_dir(self, node_id: int) -> Path:
        return self.home / f"node-{node_id}"

    def log_file(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "node.log"

    def _props_file(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "server.properties"

    def _marker(self, node_id: int) -> str:
        # The properties path is unique to this node of this cluster: it tells our process from any other java.
        return str(self._props_file(node_id))

    def pid(self, node_id: int) -> int | None:
        return process.read_pid(self.node_dir(node_id) / "pid", self._marker(node_id))

    def _any_alive(self) -> bool:
        return any(self.pid(n.node_id) for n in self.layout.nodes)

    def running(self) -> bool:
        return all(self._live_pid(n.node_id) for n in self.layout.nodes)

    # -- configuration ---------------------------------------------------------------------------------------

    def properties(self, node: Node) -> dict[str, str]:
        count = len(self.layout.nodes)
        replication = min(3, count)
        min_isr = 2 if replication >= 3 else 1
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.layout.nodes)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.node_dir(node.node_id) / "data"),
            "num.partitions": "1",
            "default.replication.factor": str(replication),
            "min.insync.replicas": str(min_isr),
            "offsets.topic.replication.factor": str(replication),
            "transaction.state.log.replication.factor": str(replication),
            "transaction.state.log.min.isr": str(min_isr),
            "share.coordinator.state.topic.replication.factor": str(replication),
            "share.coordinator.state.topic.min.isr": str(min_isr),
            # Topics are created deliberately (cluster init, task queues on first use), never by a typo.
            "auto.create.topics.enable": "false",
            "group.initial.rebalance.delay.ms": "0",
            # A crashed or frozen producer's open transaction holds back every read_committed reader of the
            # partitions it touched until the coordinator aborts it: check for expired transactions every 500 ms
            # (Kafka's default is 10 s), so the bound is the producer's transaction.timeout.ms (the processor's
            # is 2 s) plus half a second. docs/reliability.md says the same to operators.
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
            # Let group members ask for short sessions (Kafka's floor is 6 s): the processor takes the broker's
            # minimum but at least 3 s, so a crashed server's shards move, and a restarted one rejoins, sooner.
            "group.min.session.timeout.ms": "1000",
        }
        if self.layout.sasl:
            props.update(self._sasl_properties(node))
        props.update(self.layout.extra_config)
        return props

    def _sasl_properties(self, node: Node) -> dict[str, str]:
        password = self.admin_security()["sasl.password"]
        scram_client = f'{_SCRAM} required username="{ADMIN_USER}" password="{password}";'
        plain = f'{_PLAIN} required username="{ADMIN_USER}" password="{password}" user_{ADMIN_USER}="{password}";'
        return {
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{node.port}",
            "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": scram_client,
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": f"{_SCRAM} required;",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": plain,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN_USER}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def _write_properties(self, node: Node) -> None:
        path = self._props_file(node.node_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        body = "".join(f"{k}={v}\n" for k, v in self.properties(node).items())
        path.write_text("# Written by ostinato.infra.kafka; regenerated at every start.\n" + body)
        path.chmod(0o600)  # a SASL cluster's file holds the admin's password

    def _jvm(self, java: str, libs: Path, heap: str) -> list[str]:
        opts = os.environ.get("OSTINATO_KAFKA_JVM_OPTS", "").split()
        return [
            java, heap, *opts, "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={template('log4j2.properties')}",
            "-cp", f"{libs}/*",
        ]

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> KafkaCluster:
        """Start every node that is not running and wait until all brokers answer metadata requests."""
        java = java_executable()
        libs = fetch(self.layout.version)
        self.home.mkdir(parents=True, exist_ok=True)
        to_start = [n for n in self.layout.nodes if not self._live_pid(n.node_id)]
        for node in to_start:
            process.check_port_free(node.port, what=f"Kafka node {node.node_id}")
            process.check_port_free(node.controller_port, what=f"Kafka controller {node.node_id}")
        self.layout.save(self.home / "cluster.json")
        for node in to_start:
            self._write_properties(node)
        self._format([n for n in to_start if not (self.node_dir(n.node_id) / "data" / "meta.properties").exists()],
                     java, libs)
        for node in to_start:
            self._spawn(node, java, libs)
        self.wait_ready(timeout)
        return self

    def _format(self, nodes: list[Node], java: str, libs: Path) -> None:
        """Format KRaft storage; in parallel, with a JVM tuned for a short run."""
        procs = []
        for node in nodes:
            argv = [*self._jvm(java, libs, "-Xmx256m"), "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                    "kafka.tools.StorageTool", "format", f"--cluster-id={self.layout.cluster_id}",
                    "-c", str(self._props_file(node.node_id)), "--ignore-formatted"]
            if self.layout.sasl:  # the super user exists from the first start (its password is in no log)
                argv += ["--add-scram", f"SCRAM-SHA-512=[name={ADMIN_USER},"
                                        f"password={self.admin_security()['sasl.password']}]"]
            procs.append((node, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
        for node, proc in procs:
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                tail = "\n".join(out.decode(errors="replace").splitlines()[-10:])
                raise InfraError(f"formatting storage of Kafka node {node.node_id} failed:\n{tail}")

    def _spawn(self, node: Node, java: str, libs: Path) -> None:
        heap = os.environ.get("OSTINATO_KAFKA_HEAP", "-Xmx1g")
        argv = [*self._jvm(java, libs, heap), "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                *self._class_sharing(node, java, libs), _MAIN, str(self._props_file(node.node_id))]
        log = self.log_file(node.node_id)
        if log.exists() and log.stat().st_size > 50 * 2**20:
            log.replace(log.with_suffix(".log.1"))
        self._procs[node.node_id] = process.spawn(argv, log, self.node_dir(node.node_id) / "pid")

    def _class_sharing(self, node: Node, java: str, libs: Path) -> list[str]:
        """JVM flags that use the shared class archive, or have the first node write it when it exits.

        The JVM writes the archive at a clean exit, to a private name; `stop` moves it into place once the
        process is gone, so no reader ever maps a half-written file (a killed node simply writes none).
        """
        if os.environ.get("OSTINATO_KAFKA_CDS", "1") == "0":
            return []
        self._adopt_class_archive(node.node_id)
        archive = class_data_archive(libs, java)
        if archive.exists():
            return [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto"]
        if node.node_id != self.layout.nodes[0].node_id:
            return []
        pending = archive.with_name(f"{archive.name}.{uuid.uuid4().hex[:8]}.tmp")
        (self.node_dir(node.node_id) / "cds-pending").write_text(f"{pending}\n{archive}\n")
        return [f"-XX:ArchiveClassesAtExit={pending}"]

    def _adopt_class_archive(self, node_id: int) -> None:
        marker = self.node_dir(node_id) / "cds-pending"
        if not marker.exists() or self.pid(node_id):
            return
        pending, archive = (Path(line) for line in marker.read_text().split())
        if pending.exists():
            if pending.stat().st_size > 0 and not archive.exists():
                pending.replace(archive)
            else:
                pending.unlink(missing_ok=True)
        marker.unlink()

    def wait_ready(self, timeout: float = 120.0, nodes: int | None = None) -> None:
        """Block until `nodes` brokers (default all) are registered and answering; fail fast if one dies."""
        from confluent_kafka.admin import AdminClient  # imported late: `ostinato dev stop` need not load it

        want = len(self.layout.nodes) if nodes is None else nodes
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **self.admin_security(), "logger": _QUIET})
        deadline = time.monotonic() + timeout
        while True:
            for node in self.layout.nodes:
                if nodes is None and self._exited(node.node_id):
                    raise InfraError(
                        f"Kafka node {node.node_id} exited during start-up. Last lines of "
                        f"{self.log_file(node.node_id)}:\n{process.tail(self.log_file(node.node_id))}"
                    )
            try:
                if len(admin.list_topics(timeout=1.0).brokers) >= want:
                    return
            except Exception:  # noqa: BLE001 - KafkaException while the broker is still coming up
                pass
            if time.monotonic() > deadline:
                raise InfraError(
                    f"Kafka at {self.bootstrap} did not become ready within {timeout:.0f}s; "
                    f"see {self.log_file(self.layout.nodes[0].node_id)}"
                )
            time.sleep(0.1)

    def _live_pid(self, node_id: int) -> int | None:
        proc = self._procs.get(node_id)
        if proc is not None and proc.poll() is None:
            return proc.pid
        return self.pid(node_id)

    def _exited(self, node_id: int) -> bool:
        """Whether a node died: certain for a process this object started, else judged from its pid file."""
        proc = self._procs.get(node_id)
        if proc is not None:
            return proc.poll() is not None
        pid_file = self.node_dir(node_id) / "pid"
        return pid_file.exists() and self.pid(node_id) is None

    def stop(self, timeout: float = 30.0) -> list[int]:
        """Stop all nodes together (one at a time could strand the last ones without a quorum)."""
        pids = {n.node_id: pid for n in self.layout.nodes if (pid := self._live_pid(n.node_id))}
        for pid in pids.values():
            process.signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node_id, pid in pids.items():
            if not process.wait_dead(pid, max(0.1, deadline - time.monotonic())):
                process.terminate(pid, self._marker(node_id), timeout=0.1)
            process.wait_reaped(pid)
            (self.node_dir(node_id) / "pid").unlink(missing_ok=True)
            self._adopt_class_archive(node_id)
        return sorted(pids)

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node, as a machine failure would."""
        pid = self._live_pid(node_id)
        if pid is None:
            raise InfraError(f"Kafka node {node_id} is not running")
        process.kill(pid)

    def start_node(self, node_id: int, timeout: float = 120.0) -> None:
        node = next(n for n in self.layout.nodes if n.node_id == node_id)
        if self._live_pid(node_id):
            return
        java = java_executable()
        libs = fetch(self.layout.version)
        self._write_properties(node)
        self._spawn(node, java, libs)
        self.wait_ready(timeout)

    def wipe(self) -> None:
        """Stop and delete everything under home: the next start formats fresh storage."""
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)

    def status(self) -> list[dict[str, object]]:
        return [
            {"node_id": n.node_id, "port": n.port, "controller_port": n.controller_port,
             "pid": self.pid(n.node_id), "log": str(self.log_file(n.node_id))}
            for n in self.layout.nodes
        ]


# librdkafka log sink for readiness polling: connection refusals are expected there, not news.
_QUIET = logging.getLogger("ostinato.infra.kafka.probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False
