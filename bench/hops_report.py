"""The tables of bench/hops.py, from its report (plain data, as in its JSON): rich tables for a terminal, markdown
for docs/benchmarks.md (`--markdown`), so a "before" and an "after" are printed the same way."""

from __future__ import annotations

from typing import Any

from bench import kafka_floor
from bench.waterfall import (
    ARRIVE_FIRST,
    ARRIVE_NEXT,
    DECIDE,
    END_TO_END,
    FLUSH,
    HANDLE,
    MARKERS,
    OFFSETS,
    PRODUCE,
    RESULT,
    STEP_TOTAL,
    TAKEN,
)

# The floor stage beside a hop of the waterfall (bench/kafka_floor.py), where one compares.
FLOOR_OF = {TAKEN: kafka_floor.TO_PROCESSOR, OFFSETS: kafka_floor.SEND_OFFSETS, FLUSH: kafka_floor.COMMIT,
            ARRIVE_NEXT: kafka_floor.TO_READER, STEP_TOTAL: kafka_floor.ROUND_TRIP}


def _f(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


def render(report: dict[str, Any], file: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file, width=200, highlight=False)
    phases = report["phases"]
    lone, half = phases.get("lone", {}), phases.get("half load", {})
    meta = report["meta"]
    console.print(f"Hop anatomy of a hello workflow ({meta['cpus']} CPUs, load average "
                  f"{meta.get('load_average_at_start', '?')} at start, {meta['load_average']} at the end, "
                  f"Python {meta['python']}); lone: {lone.get('workflows', 0)} one at a time; half load: "
                  f"{half.get('workflows', 0)} at {half.get('rate')}/s (closed loop "
                  f"{report['closed_loop'].get('workflows_per_s')} wf/s at {report['closed_loop'].get('concurrency')} "
                  f"in flight)")
    table = Table(title="Waterfall, ms (each step is one command of the workflow; hops in series unless marked)")
    for col in ("step", "hop", "lone p50", "lone p90", "half p50", "half p90", "floor alone p50", "floor loaded p50"):
        table.add_column(col, justify="left" if col in ("step", "hop") else "right")
    index = {(r["step"], r["hop"]): r for r in half.get("waterfall", [])}
    seen = set()
    for r in lone.get("waterfall", []) + [r for r in half.get("waterfall", []) if (r["step"], r["hop"]) not in
                                          {(x["step"], x["hop"]) for x in lone.get("waterfall", [])}]:
        key = (r["step"], r["hop"])
        if key in seen:
            continue
        seen.add(key)
        h = index.get(key, {})
        stage = FLOOR_OF.get(r["hop"])
        floors = [_f(p.get("floor", {}).get(stage, {}).get("p50")) if stage else "" for p in (lone, half)]
        hop = r["hop"] if r["in_series"] or r["hop"] == END_TO_END else f"({r['hop']})"
        table.add_row(r["step"], hop, _f(r["p50"]), _f(r["p90"]), _f(h.get("p50")), _f(h.get("p90")), *floors)
    table.add_row("", "sum of the p50s in series", _f(lone.get("series_p50_sum")), "", _f(half.get("series_p50_sum")),
                  "", "", "")
    console.print(table)
    console.print("Floor column: the bench/kafka_floor.py stage beside the hop (" +
                  "; ".join(f"{hop.split(' (')[0]} ~ {stage}" for hop, stage in FLOOR_OF.items()) + ").")

    shares = Table(title="Where the mean latency goes: mean ms per hop kind, summed over the steps (means add up)")
    for col in ("hop", "lone ms", "lone share", "half ms", "half share"):
        shares.add_column(col, justify="left" if col == "hop" else "right")
    for hop, cells in _shares(lone, half):
        shares.add_row(hop, *cells)
    console.print(shares)

    floor_table = Table(title="Kafka floor, ms (the engine's client settings, one round trip at a time)")
    for col in ("stage", "alone p50", "alone p90", "loaded p50", "loaded p90", "n (alone / loaded)"):
        floor_table.add_column(col, justify="left" if col == "stage" else "right")
    for stage in kafka_floor.STAGES:
        a, b = lone.get("floor", {}).get(stage, {}), half.get("floor", {}).get(stage, {})
        floor_table.add_row(stage, _f(a.get("p50")), _f(a.get("p90")), _f(b.get("p50")), _f(b.get("p90")),
                            f"{a.get('n', 0)} / {b.get('n', 0)}")
    console.print(floor_table)

    writes = Table(title="Written per workflow, by topic (consumer: records and key+value bytes; broker log: "
                         "records, batches, markers and bytes on disk, every producer, in the phase's window)")
    for col in ("topic", "lone records", "lone bytes", "lone log records", "lone log batches", "lone markers",
                "lone log bytes", "half log batches", "half markers", "half log bytes"):
        writes.add_column(col, justify="left" if col == "topic" else "right")
    topics = sorted(set(lone.get("writes_per_workflow", {})) | set(lone.get("log_per_workflow", {})) |
                    set(half.get("log_per_workflow", {})))
    for t in topics:
        w, lg, hl = (lone.get("writes_per_workflow", {}).get(t, {}), lone.get("log_per_workflow", {}).get(t, {}),
                     half.get("log_per_workflow", {}).get(t, {}))
        writes.add_row(t, _f(w.get("records"), 2), _f(w.get("bytes"), 0), _f(lg.get("records"), 2),
                       _f(lg.get("batches"), 2), _f(lg.get("markers"), 2), _f(lg.get("bytes"), 0),
                       _f(hl.get("batches"), 2), _f(hl.get("markers"), 2), _f(hl.get("bytes"), 0))
    console.print(writes)

    per = Table(title="Per transaction and per workflow (CPU at half load includes the floor beside it; the closed "
                      "loop's does not)")
    for col in ("figure", "lone", "half load", "closed loop"):
        per.add_column(col, justify="left" if col == "figure" else "right")
    lt, ht = lone.get("transactions", {}), half.get("transactions", {})
    pm_l, pm_h = lone.get("processor_metrics", {}), half.get("processor_metrics", {})
    closed = report["closed_loop"]
    rows: list[tuple[str, ...]] = [
        ("end-to-end latency p50 / p90 ms", _pair(lone, END_TO_END), _pair(half, END_TO_END),
         f"{_f(closed.get('p50_ms'))} / -"),
        ("processor transactions per workflow", _f(lt.get("per_workflow"), 2), _f(ht.get("per_workflow"), 2)),
        ("shards' offsets per transaction (mean)", _f(lt.get("shards_consumed_mean"), 2),
         _f(ht.get("shards_consumed_mean"), 2)),
        ("partitions per transaction p50 / max (markers written)",
         f"{_f(lt.get('partitions_p50'), 0)} / {_f(lt.get('partitions_max'), 0)}",
         f"{_f(ht.get('partitions_p50'), 0)} / {_f(ht.get('partitions_max'), 0)}"),
        ("records per transaction p50 / max",
         f"{_f(lt.get('records_p50'), 0)} / {_f(lt.get('records_max'), 0)}",
         f"{_f(ht.get('records_p50'), 0)} / {_f(ht.get('records_max'), 0)}"),
        ("partitions per transaction by topic (mean)", _topics(lt.get("partitions_by_topic_mean")),
         _topics(ht.get("partitions_by_topic_mean"))),
        ("offset commits per workflow by group (outside transactions too)",
         _topics(lone.get("offset_commits_per_workflow")), _topics(half.get("offset_commits_per_workflow"))),
        ("commands per transaction (/metrics)", _f(pm_l.get("commands_per_transaction"), 2),
         _f(pm_h.get("commands_per_transaction"), 2)),
        ("processor transaction ms p50 / p90 (/metrics, begin → commit returned)",
         f"{_f(pm_l.get('transaction_ms_p50'))} / {_f(pm_l.get('transaction_ms_p90'))}",
         f"{_f(pm_h.get('transaction_ms_p50'))} / {_f(pm_h.get('transaction_ms_p90'))}"),
    ]
    idle_cpu = report.get("idle_cpu_ms_per_s", {})
    rows.append(("idle CPU ms per second (no workflow running): broker / server / worker",
                 " / ".join(_f(idle_cpu.get(r)) for r in ("broker", "server", "worker")), "", ""))
    for role in ("broker", "server", "worker", "generator"):
        rows.append((f"CPU ms per workflow: {role}", _f(lone.get("cpu_ms_per_workflow", {}).get(role), 2),
                     _f(half.get("cpu_ms_per_workflow", {}).get(role), 2),
                     _f(closed.get("cpu_ms_per_workflow", {}).get(role), 2)))
    for r in rows:
        per.add_row(*r, *([""] * (4 - len(r))))
    console.print(per)


def _shares(lone: dict[str, Any], half: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(hop, [lone ms, lone share, half ms, half share]) in series order, then the total and the measured mean."""
    out = []
    hops = list(dict.fromkeys([*lone.get("mean_by_hop", {}), *half.get("mean_by_hop", {})]))
    totals = [sum(p.get("mean_by_hop", {}).values()) for p in (lone, half)]
    for hop in hops:
        cells = []
        for phase, total in zip((lone, half), totals, strict=True):
            ms = phase.get("mean_by_hop", {}).get(hop)
            cells += [_f(ms), f"{ms / total:.0%}" if ms is not None and total else ""]
        out.append((hop, cells))
    out.append(("sum", [_f(totals[0]), "", _f(totals[1]), ""]))
    means = [next((r.get("mean") for r in p.get("waterfall", []) if r["hop"] == END_TO_END), None)
             for p in (lone, half)]
    out.append(("measured mean end to end", [_f(means[0]), "", _f(means[1]), ""]))
    return out


def _pair(phase: dict[str, Any], hop: str) -> str:
    row: dict[str, Any] = next((r for r in phase.get("waterfall", []) if r["hop"] == hop), {})
    return f"{_f(row.get('p50'))} / {_f(row.get('p90'))}"


def _topics(found: dict[str, float] | None) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in (found or {}).items()) or "-"


# -- markdown ---------------------------------------------------------------------------------------------------------

WATERFALL_ROWS = (  # (label, hops): the first step arrives from the client, the others from a worker
    ("command produced: client → gateway → topic (step 1); previous step readable → worker → produced",
     (ARRIVE_FIRST, ARRIVE_NEXT)),
    ("commands topic → processor batch (fetch, queue)", (TAKEN,)),
    ("decide + encode (the batch)", (DECIDE,)),
    ("produce (hand to librdkafka)", (PRODUCE,)),
    ("send offsets (AddOffsetsToTxn, TxnOffsetCommit)", (OFFSETS,)),
    ("commit: produce acks + EndTxn reaches the coordinator", (FLUSH,)),
    ("commit: EndTxn → markers written (readable)", (MARKERS,)),
    ("**step: command produced → readable**", (STEP_TOTAL,)),
)


def markdown(report: dict[str, Any]) -> str:
    """The waterfall of each phase (hops as rows, steps as columns, p50 / p90 ms, the floor beside), the floor, the
    writes per workflow and the per-transaction and CPU figures, as markdown tables."""
    out = []
    for name, phase in report["phases"].items():
        rate = f" at {phase['rate']}/s" if phase.get("rate") else ""
        out.append(f"**{name}** ({phase['workflows']} workflows{rate}; p50 / p90 ms; the floor column is the "
                   f"{'alone' if name == 'lone' else 'loaded'} floor's p50)")
        out.append(_waterfall_markdown(phase))
    lone, half = report["phases"].get("lone", {}), report["phases"].get("half load", {})
    lines = ["| where the mean latency goes (summed over the steps) | lone ms | share | half load ms | share |",
             "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {hop} | " + " | ".join(cells) + " |" for hop, cells in _shares(lone, half)]
    out.append("\n".join(lines))
    out.append(_floor_markdown(report))
    out.append(_writes_markdown(report))
    out.append(_per_markdown(report))
    return "\n\n".join(out) + "\n"


def _cell(row: dict[str, Any] | None) -> str:
    return "" if row is None or not row.get("n") else f"{_f(row['p50'])} / {_f(row['p90'])}"


def _waterfall_markdown(phase: dict[str, Any]) -> str:
    rows = phase["waterfall"]
    steps = list(dict.fromkeys(r["step"] for r in rows if r["hop"] in (ARRIVE_FIRST, ARRIVE_NEXT)))
    at = {(r["step"], r["hop"]): r for r in rows}
    lines = ["| hop | " + " | ".join(steps) + " | floor p50 |", "| --- |" + " ---: |" * (len(steps) + 1)]
    for label, hops in WATERFALL_ROWS:
        cells = [_cell(next((at[(s, h)] for h in hops if (s, h) in at), None)) for s in steps]
        stage = next((FLOOR_OF[h] for h in hops if h in FLOOR_OF), None)
        floor = _f(phase.get("floor", {}).get(stage, {}).get("p50")) if stage else ""
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {floor} |")
    for hop in (RESULT, HANDLE, END_TO_END):
        row = next((r for r in rows if r["hop"] == hop), None)
        lines.append(f"| {hop} | {_cell(row)} |" + " |" * len(steps))
    lines.append(f"| sum of the p50s in series | {_f(phase.get('series_p50_sum'))} |" + " |" * len(steps))
    return "\n".join(lines)


def _floor_markdown(report: dict[str, Any]) -> str:
    lone, half = report["phases"].get("lone", {}), report["phases"].get("half load", {})
    lines = ["| Kafka floor stage | alone p50 / p90 ms | under the half load p50 / p90 ms |", "| --- | ---: | ---: |"]
    for stage in kafka_floor.STAGES:
        lines.append(f"| {stage} | {_cell(lone.get('floor', {}).get(stage))} | "
                     f"{_cell(half.get('floor', {}).get(stage))} |")
    return "\n".join(lines)


def _writes_markdown(report: dict[str, Any]) -> str:
    lone, half = report["phases"].get("lone", {}), report["phases"].get("half load", {})
    lines = ["| per workflow, by topic | records (read back) | key+value bytes | log batches | markers | log bytes "
             "| half load: log batches | markers | log bytes |", "| --- |" + " ---: |" * 8]
    topics = sorted(set(lone.get("writes_per_workflow", {})) | set(lone.get("log_per_workflow", {})))
    total = [0.0] * 8
    for t in topics:
        w, lg, hl = (lone.get("writes_per_workflow", {}).get(t, {}), lone.get("log_per_workflow", {}).get(t, {}),
                     half.get("log_per_workflow", {}).get(t, {}))
        values = [w.get("records"), w.get("bytes"), lg.get("batches"), lg.get("markers"), lg.get("bytes"),
                  hl.get("batches"), hl.get("markers"), hl.get("bytes")]
        total = [a + (b or 0.0) for a, b in zip(total, values, strict=True)]
        lines.append(f"| {t} | " + " | ".join(_f(v, 0 if i in (1, 4, 7) else 2) for i, v in enumerate(values)) + " |")
    lines.append("| **all** | " + " | ".join(_f(v, 0 if i in (1, 4, 7) else 2) for i, v in enumerate(total)) + " |")
    return "\n".join(lines)


def _per_markdown(report: dict[str, Any]) -> str:
    phases, closed = report["phases"], report["closed_loop"]
    lone, half = phases.get("lone", {}), phases.get("half load", {})
    lt, ht = lone.get("transactions", {}), half.get("transactions", {})
    idle = report.get("idle_cpu_ms_per_s", {})
    lines = ["| figure | lone | half load | closed loop |", "| --- | ---: | ---: | ---: |",
             f"| processor transactions per workflow | {_f(lt.get('per_workflow'), 2)} | "
             f"{_f(ht.get('per_workflow'), 2)} | |",
             f"| partitions per transaction p50 / max | {_most(lt, 'partitions')} | {_most(ht, 'partitions')} | |",
             f"| records per transaction p50 / max | {_most(lt, 'records')} | {_most(ht, 'records')} | |",
             f"| commands per transaction (/metrics) | "
             f"{_f(lone.get('processor_metrics', {}).get('commands_per_transaction'), 2)} | "
             f"{_f(half.get('processor_metrics', {}).get('commands_per_transaction'), 2)} | |",
             f"| processor transaction ms p50 / p90 (/metrics) | {_metrics_pair(lone)} | {_metrics_pair(half)} | |",
             f"| offset commits per workflow, by group | {_topics(lone.get('offset_commits_per_workflow'))} | "
             f"{_topics(half.get('offset_commits_per_workflow'))} | |"]
    for role in ("broker", "server", "worker"):
        lines.append(f"| CPU ms per workflow: {role} | {_f(lone.get('cpu_ms_per_workflow', {}).get(role))} | "
                     f"{_f(half.get('cpu_ms_per_workflow', {}).get(role))} | "
                     f"{_f(closed.get('cpu_ms_per_workflow', {}).get(role))} |")
    lines.append("| idle CPU ms per second: broker / server / worker | "
                 + " / ".join(_f(idle.get(r)) for r in ("broker", "server", "worker")) + " | | |")
    lines.append(f"| closed loop ({closed.get('concurrency')} in flight): wf/s, p50 ms | | | "
                 f"{_f(closed.get('workflows_per_s'))}, {_f(closed.get('p50_ms'))} |")
    return "\n".join(lines)


def _most(txns: dict[str, Any], what: str) -> str:
    return f"{_f(txns.get(what + '_p50'), 0)} / {_f(txns.get(what + '_max'), 0)}"


def _metrics_pair(phase: dict[str, Any]) -> str:
    found = phase.get("processor_metrics", {})
    return f"{_f(found.get('transaction_ms_p50'))} / {_f(found.get('transaction_ms_p90'))}"
