"""The server's /metrics with processors in processes of their own: their expositions added up as if they were
threads of one process (`services/frontend/relay.py:merge_exposition`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ostinato.services.frontend.relay import merge_exposition
from ostinato.services.history.metrics import ProcessorMetrics


def _exposition(commands: int, owned: int, commits: list[float], aborts: dict[str, int]) -> str:
    registry = CollectorRegistry()
    metrics = ProcessorMetrics(registry)
    metrics.commands.inc(commands)
    metrics.owned_shards.set(owned)
    for seconds in commits:
        metrics.commit_seconds.observe(seconds)
    for cause, n in aborts.items():
        metrics.aborts.labels(cause).inc(n)
    return generate_latest(registry).decode()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_samples_of_the_same_name_and_labels_add_up() -> None:
    merged = _samples(merge_exposition([
        _exposition(7, 2, [0.003, 0.3], {"fenced": 1}),
        _exposition(5, 1, [0.003], {"fenced": 2, "timeout": 1}),
    ]).decode())
    assert merged[("ostinato_processor_commands_total", ())] == 12
    assert merged[("ostinato_processor_owned_shards", ())] == 3
    assert merged[("ostinato_processor_commit_seconds_count", ())] == 3
    assert merged[("ostinato_processor_commit_seconds_bucket", (("le", "0.005"),))] == 2
    assert merged[("ostinato_processor_commit_seconds_bucket", (("le", "+Inf"),))] == 3
    assert abs(merged[("ostinato_processor_commit_seconds_sum", ())] - 0.306) < 1e-9
    assert merged[("ostinato_processor_aborts_total", (("cause", "fenced"),))] == 3
    assert merged[("ostinato_processor_aborts_total", (("cause", "timeout"),))] == 1
    assert not any(name.endswith("_created") for name, _ in merged), "creation times do not add up"


def test_one_process_and_none() -> None:
    alone = _exposition(4, 4, [0.01], {})
    assert _samples(merge_exposition([alone]).decode()) == {
        k: v for k, v in _samples(alone).items() if not k[0].endswith("_created")}
    assert merge_exposition([]) == b""
