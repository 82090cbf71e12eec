"""The harness's arithmetic: percentiles by nearest rank, ratios, and goals reported met or not from results; and
metrics an engine leaves to be read after the measured window."""

from __future__ import annotations

import asyncio
import math

from bench.compare import goals, ratio_table
from bench.harness import Outcome, Result, Scenario, percentiles, run_scenario


def _result(engine: str, scenario: str, wfs: float, p50: float, metric: dict[str, float] | None = None) -> Result:
    return Result(engine=engine, scenario=scenario, shape="hello", mode="closed", count=10, concurrency=1,
                  elapsed_s=1.0, workflows_per_s=wfs, activities_per_s=wfs,
                  latency_ms={"p50": p50, "p95": p50, "p99": p50 * 2, "max": p50 * 2}, metric_ms=metric, failures=0)


def test_percentiles_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentiles(values) == {"p50": 50.0, "p95": 95.0, "p99": 99.0, "max": 100.0}
    assert percentiles([7.0]) == {"p50": 7.0, "p95": 7.0, "p99": 7.0, "max": 7.0}
    assert all(math.isnan(v) for v in percentiles([]).values())


def test_ratios_say_how_many_times_better_ostinato_is() -> None:
    table = ratio_table([_result("ostinato", "S1", 100, 10), _result("temporal", "S1", 25, 40)], "ostinato")
    assert "| S1 hello | temporal | 4.00 | 4.00 | 4.00 |  |" in table


def test_goals_are_reported_met_or_not() -> None:
    results = [_result("ostinato", "S1", 1200, 10), _result("temporal", "S1", 100, 40),
               _result("ostinato", "S1½", 600, 12), _result("ostinato", "S4", 0, 0, {"p50": 5, "p99": 80})]
    table = goals(results, 9000)
    assert "| S1 >= 10x Temporal's throughput | 12.0x | yes |" in table
    assert "| S1 >= 1,000 wf/s | 1,200.0 | yes |" in table
    assert "| p50 hello <= 15 ms at half load | 12.0 ms | yes |" in table
    assert "| S4 timer lateness p99 <= 50 ms | 80.0 ms | no |" in table
    assert "| processor >= 10k commands/s | 9,000.0 | no |" in table
    assert "| S2 >= 150 wf/s | n/a | no |" in table


class _LateReader:
    """An engine whose workflows leave their metric for later, recording when each workflow and each read ran."""

    name = "fake"

    def __init__(self) -> None:
        self.log: list[str] = []

    async def run_one(self, scenario: Scenario, workflow_id: str) -> Outcome:
        await asyncio.sleep(0.001)
        self.log.append("run")
        n = int(workflow_id.rsplit("-", 1)[1])

        async def read() -> float:
            self.log.append("read")
            if n == 100:
                raise RuntimeError("the history is gone")  # left out of the metric, not a crash
            return float(n)

        return Outcome(0.001, later=read)

    def processes(self) -> dict[str, list[int]]:
        return {}


def test_metrics_left_for_later_are_read_after_every_measured_workflow_ran() -> None:
    engine = _LateReader()
    scenario = Scenario("S4", "sleep1s", count=101, concurrency=10, warmup=0)
    result = asyncio.run(run_scenario(engine, scenario, "t"))  # type: ignore[arg-type]
    measured = engine.log
    assert measured.count("run") == 101 and measured.count("read") == 101
    assert measured.index("read") > max(i for i, what in enumerate(measured) if what == "run")  # outside the window
    assert result.metric_ms is not None and result.metric_ms["max"] == 99.0 and result.metric_ms["p50"] == 49.0
