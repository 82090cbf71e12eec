"""`--kafka-config FILE`: the Kafka client security settings (SASL, TLS) of a command and of what it starts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from ostinato.kafka.clients import CONFIG_FILE_ENV, security_config

KafkaConfigOpt = Annotated[Path | None, typer.Option(
    "--kafka-config", envvar=CONFIG_FILE_ENV,
    help="librdkafka security settings (security.protocol, sasl.*, ssl.*) as name=value lines; "
         "OSTINATO_KAFKA_<PROPERTY> variables override them (docs/security.md).")]


def use_kafka_config(path: Path | None) -> dict[str, str]:
    """Make `path` the settings file of every Kafka client of this process and of the processes it starts (through
    the environment, as `--kafka-config` is the variable's flag), and check the settings now: a bad file is one clear
    line at start, not a failure inside a client thread. Returns the settings (secrets included: never log them).

    Raises:
        KafkaConfigError: the file cannot be read or names a property that is not a security setting.
    """
    if path is not None:
        os.environ[CONFIG_FILE_ENV] = str(Path(path).expanduser().resolve())
    return security_config()
