"""Configuration shared by every confluent-kafka client Ostinato creates: where Kafka is, and how a client proves who
it is and encrypts (SASL, TLS).

The security settings are librdkafka properties from three places, later ones winning: the properties file named by
`OSTINATO_KAFKA_CONFIG` (what `--kafka-config FILE` sets), `OSTINATO_KAFKA_<PROPERTY>` environment variables
(`OSTINATO_KAFKA_SASL_PASSWORD` is `sasl.password`), and what a caller passes (`Worker(kafka_config={...})`). Only
properties of authentication and encryption are accepted (`security.protocol`, `sasl.*`, `ssl.*`, ...): how each
client behaves (idempotence, isolation, groups, transactions) stays the code's. docs/security.md lists them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from ostinato.schemas.topics import MAX_RECORD_BYTES

# librdkafka's own log lines (retries, reconnects) go here; silent unless the application configures logging.
log = logging.getLogger("ostinato.kafka")
log.addHandler(logging.NullHandler())

CONFIG_FILE_ENV = "OSTINATO_KAFKA_CONFIG"
PROPERTY_ENV_PREFIX = "OSTINATO_KAFKA_"
DEFAULT_SASL_MECHANISM = "SCRAM-SHA-512"
# How long the broker may hold a long-lived consumer's empty fetch (librdkafka's default). A held fetch is answered
# as soon as a record or a transaction marker makes data readable, so a long wait costs no latency; a short one
# costs the broker a request every few ms per idle consumer. The processors, replies readers, workers and rate
# limiters fetched with 10-50 ms: an idle cluster's broker spent 206-254 ms of CPU a second answering them, and
# 86-102 ms with this (bench/hops.py, docs/benchmarks.md, "Idle fetches"). Readers that must see a topic's end
# from an empty fetch (the cluster settings and ownership readers at start, the restorer) keep short waits.
STEADY_FETCH_WAIT_MS = 500
_SECURITY_EXACT = frozenset({"security.protocol", "enable.ssl.certificate.verification",
                             "enable.sasl.oauthbearer.unsecure.jwt"})
_SECURITY_PREFIXES = ("sasl.", "ssl.")
# Java client settings that librdkafka does not know, with what to write instead.
_JAVA_ONLY = {
    "sasl.jaas.config": "librdkafka takes sasl.username and sasl.password instead",
    "ssl.truststore.location": "librdkafka reads PEM: ssl.ca.location",
    "ssl.truststore.password": "librdkafka reads PEM: ssl.ca.location",
    "ssl.truststore.type": "librdkafka reads PEM: ssl.ca.location",
    "ssl.keystore.type": "librdkafka reads PKCS#12 (ssl.keystore.location) or PEM (ssl.certificate.location, "
                         "ssl.key.location)",
    "sasl.login.callback.handler.class": "not a librdkafka setting",
    "sasl.client.callback.handler.class": "not a librdkafka setting",
}
# Values never shown in logs or answers: passwords, client secrets, private keys, OAuth configurations.
_SECRET_MARKS = ("password", "secret", "key.pem", "oauthbearer.config")
# What a client may learn of another process's settings (the server's `GET /api/v1/cluster`): nothing secret.
PUBLIC_PROPERTIES = ("security.protocol", "sasl.mechanism")


class KafkaUnavailable(RuntimeError):
    """The bootstrap servers did not answer in time."""


class KafkaConfigError(ValueError):
    """Kafka client settings that cannot be used: an unreadable file, a property that is not a security setting."""


def is_security_property(name: str) -> bool:
    """Whether `name` is a librdkafka property of authentication or encryption (those the settings may carry)."""
    return name in _SECURITY_EXACT or name.startswith(_SECURITY_PREFIXES)


def is_secret(name: str) -> bool:
    return any(mark in name for mark in _SECRET_MARKS)


def read_properties(path: Path) -> dict[str, str]:
    """A properties file: `name=value` (or `name: value`) per line, `#` and `!` start comments; no escapes."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise KafkaConfigError(f"cannot read the Kafka client settings {path}: {exc.strerror or exc}") from None
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise KafkaConfigError(f"{path}:{number}: expected name=value")
        found[line[:cut].strip()] = line[cut + 1:].strip()
    return check_security(found, str(path))


def check_security(settings: Mapping[str, str], source: str) -> dict[str, str]:
    """`settings` as strings, or KafkaConfigError naming each property that is not a security setting."""
    problems = []
    for name in settings:
        if name in _JAVA_ONLY:
            problems.append(f"{name} is a Java client setting ({_JAVA_ONLY[name]})")
        elif name == "bootstrap.servers":
            problems.append("bootstrap.servers is given with --kafka or OSTINATO_KAFKA")
        elif not is_security_property(name):
            problems.append(f"{name} is not a security setting (security.protocol, sasl.*, ssl.*)")
    if problems:
        raise KafkaConfigError(f"Kafka client settings from {source}: " + "; ".join(problems))
    return {name: str(value) for name, value in settings.items()}


def security_config(overrides: Mapping[str, str] | None = None,
                    environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The security settings every client of this process uses: the file named by OSTINATO_KAFKA_CONFIG, then
    OSTINATO_KAFKA_<PROPERTY> variables, then `overrides`. A SASL protocol without a mechanism means SCRAM-SHA-512.

    Raises:
        KafkaConfigError: the file cannot be read, or a setting is not a security property.
    """
    env = os.environ if environ is None else environ
    settings: dict[str, str] = {}
    path = env.get(CONFIG_FILE_ENV, "")
    if path:
        settings.update(read_properties(Path(path)))
    for name, value in env.items():
        if name.startswith(PROPERTY_ENV_PREFIX) and name != CONFIG_FILE_ENV:
            prop = name[len(PROPERTY_ENV_PREFIX):].lower().replace("_", ".")
            if is_security_property(prop):  # other OSTINATO_KAFKA_* variables are other settings (VERSION, HEAP)
                settings[prop] = value
    if overrides:
        settings.update(check_security(overrides, "the caller"))
    if settings.get("security.protocol", "").upper().startswith("SASL") and \
            not (settings.get("sasl.mechanism") or settings.get("sasl.mechanisms")):
        settings["sasl.mechanism"] = DEFAULT_SASL_MECHANISM
    return settings


def redacted(settings: Mapping[str, Any]) -> dict[str, str]:
    """`settings` fit to log: every secret replaced by `***`."""
    return {k: "***" if is_secret(k) else str(v) for k, v in settings.items() if k != "logger"}


def describe_security(settings: Mapping[str, str]) -> str:
    """One line for a start-up log: the security settings, secrets hidden."""
    if not settings:
        return "PLAINTEXT (no security settings)"
    return " ".join(f"{k}={v}" for k, v in sorted(redacted(settings).items()))


def public_security(settings: Mapping[str, str]) -> dict[str, str]:
    """What may be told to anyone (e.g. workers asking the server): the protocol and the SASL mechanism."""
    return {k: settings[k] for k in PUBLIC_PROPERTIES if k in settings}


def base_config(bootstrap: str, client_id: str, security: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Settings every client starts from: bootstrap, client id, log sink, and the security settings of this process
    (`security_config`), with `security` (e.g. a worker's own) over them."""
    return {**security_config(security), "bootstrap.servers": bootstrap, "client.id": client_id, "logger": log}


def admin_client(bootstrap: str, security: Mapping[str, str] | None = None) -> AdminClient:
    return AdminClient(base_config(bootstrap, "ostinato-admin", security))


def idempotent_producer(bootstrap: str, client_id: str, security: Mapping[str, str] | None = None) -> Producer:
    return Producer({
        **base_config(bootstrap, client_id, security),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 0,
        "message.max.bytes": MAX_RECORD_BYTES,
    })


MIN_SESSION_TIMEOUT_MS = 3_000
SESSION_TIMEOUT_ENV = "OSTINATO_SESSION_TIMEOUT_MS"
_SESSION_LOOKUP_TIMEOUT_S = 30.0


def group_session_timeout_ms(bootstrap: str, env: Mapping[str, str] | None = None) -> int:
    """The session of Ostinato's own consumer groups (the processors', the ingress mappings', the outcomes streams',
    the rate limiter's, the archiver's, the OpenSearch visibility feeder's): how long a crashed server's partitions
    wait before another member takes them, and how long a restarted server waits for its dead incarnation to leave
    the group. Kafka's default (45 s) would stall them that long after every crash; this is as short as the brokers
    allow (`group.min.session.timeout.ms`, 6 s by default, 1 s in infra/), but at least 3 s, so a loaded machine's
    scheduling hiccup does not move partitions. `OSTINATO_SESSION_TIMEOUT_MS` sets it outright."""
    env = os.environ if env is None else env
    if env.get(SESSION_TIMEOUT_ENV):
        return int(env[SESSION_TIMEOUT_ENV])
    broker_min = _brokers_min_session_ms.get(bootstrap)
    if broker_min is None:  # asked once per process and cluster: a server's groups all start together
        admin = admin_client(bootstrap)
        try:
            brokers = admin.list_topics(timeout=_SESSION_LOOKUP_TIMEOUT_S).brokers
            resource = ConfigResource(ConfigResource.Type.BROKER, str(min(brokers)))
            configs = admin.describe_configs([resource])[resource].result(_SESSION_LOOKUP_TIMEOUT_S)
            broker_min = _brokers_min_session_ms[bootstrap] = int(configs["group.min.session.timeout.ms"].value)
        except (KafkaException, KeyError, ValueError) as exc:  # not remembered: the next group asks again
            log.warning("could not read group.min.session.timeout.ms from the brokers (%s); assuming Kafka's 6000",
                        exc)
            broker_min = 6_000
    return max(MIN_SESSION_TIMEOUT_MS, broker_min)


_brokers_min_session_ms: dict[str, int] = {}


def group_session_config(session_ms: int) -> dict[str, Any]:
    """A group member's session settings for a session of `session_ms`: heartbeats at a fifth of it."""
    return {"session.timeout.ms": session_ms, "heartbeat.interval.ms": max(300, session_ms // 5)}


def reader_group(client_id: str) -> str:
    """The consumer group a `reader` names (librdkafka needs one). It is never joined and holds no offsets, but the
    client looks its coordinator up, so a principal needs DESCRIBE on it (docs/security.md)."""
    return f"{client_id}-unused"


def reader(bootstrap: str, client_id: str, isolation: str = "read_committed",
           overrides: dict[str, Any] | None = None, security: Mapping[str, str] | None = None) -> Consumer:
    """A consumer for manual assignment only (no group membership, no commits); `overrides` are further
    librdkafka settings."""
    return Consumer({
        **base_config(bootstrap, client_id, security),
        "group.id": reader_group(client_id),
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "enable.partition.eof": True,
        "fetch.max.bytes": MAX_RECORD_BYTES * 2,
        **(overrides or {}),
    })


def wait_for_brokers(admin: AdminClient, bootstrap: str, timeout: float) -> int:
    """Number of brokers, or a clear error when none answers within `timeout` seconds."""
    try:
        return len(admin.list_topics(timeout=timeout).brokers)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        detail = err.str() if isinstance(err, KafkaError) else str(exc)
        security = security_config()
        # A refused login looks like a transport failure from here (librdkafka logs the SASL error itself).
        settings = (f" Do the security settings ({describe_security(security)}) match the broker's listener?"
                    if security else " A broker that requires SASL or TLS needs --kafka-config (docs/security.md).")
        raise KafkaUnavailable(
            f"cannot reach Kafka at {bootstrap} within {timeout:.0f}s ({detail}). Is a broker running there? "
            f"`ostinato dev` starts one; OSTINATO_KAFKA or --kafka points elsewhere.{settings}"
        ) from None
