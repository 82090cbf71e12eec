"""Local ports and locations shared by `ostinato dev`, the tests and docker-compose.yml."""

import os
from pathlib import Path

KAFKA_PORT = 9092
KAFKA_CONTROLLER_PORT = 9093
OPENSEARCH_PORT = 9200
S3_PORT = 9000

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.25.3"
OPENSEARCH_VERSION = "2.19.4"  # 2.x runs on the default Java 17; 3.x needs Java 21+
S3PROXY_VERSION = "2.6.0"
MAVEN_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


def cache_dir() -> Path:
    """Where downloaded jars live: outside the repository, shared by every checkout on the machine."""
    if env := os.environ.get("OSTINATO_CACHE_DIR"):
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "ostinato"


def home_dir() -> Path:
    """Where `ostinato dev` keeps its broker data, logs and pid files."""
    return Path(os.environ.get("OSTINATO_HOME", Path.home() / ".ostinato")).expanduser()
