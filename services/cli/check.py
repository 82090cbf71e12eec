"""`ostinato check ...`: verify what the engine wrote. Exit 0 when clean, 1 when problems were found, 2 when the
check could not run, so fault tests and scripts can tell a broken history from an unreachable broker."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ostinato.infra import defaults
from ostinato.kafka.clients import KafkaConfigError, KafkaUnavailable
from ostinato.schemas.topics import DEFAULT_PREFIX
from ostinato.services.admin.checker import CheckerError, CheckReport, check_history
from ostinato.services.cli.kafka_options import KafkaConfigOpt, use_kafka_config

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

app = typer.Typer(help="Check what the engine wrote to Kafka.", no_args_is_help=True, add_completion=False)


@app.callback()
def check() -> None:
    """Check what the engine wrote to Kafka (a group even with one command, so `check history` stays stable)."""


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"


# The options of services/cli/main.py, spelled the same; not imported from it because cli.py imports this module.
KafkaOpt = Annotated[str, typer.Option("--kafka", envvar="OSTINATO_KAFKA", help="Kafka bootstrap servers.")]
PrefixOpt = Annotated[str, typer.Option("--prefix", envvar="OSTINATO_TOPIC_PREFIX", help="Topic prefix.")]
OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table or json.")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", help="Seconds to wait for Kafka, and for an open "
                                                             "transaction to end.")]
MaxProblemsOpt = Annotated[int, typer.Option("--max-problems", help="List at most this many problems.")]
DEFAULT_BOOTSTRAP = f"127.0.0.1:{defaults.KAFKA_PORT}"
EXIT_PROBLEMS, EXIT_CANNOT_CHECK = 1, 2


@app.command("history")
def history(
    kafka: KafkaOpt = DEFAULT_BOOTSTRAP,
    kafka_config: KafkaConfigOpt = None,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    output: OutputOpt = Output.TABLE,
    timeout: TimeoutOpt = 30.0,
    max_problems: MaxProblemsOpt = 50,
) -> None:
    """Verify every run in the history topic: contiguous ids, one terminal event, completions match schedules.

    Reads every partition from its beginning to its end with read_committed, as restore does, and also checks
    that no key is written twice and that each workflow's records sit on its shard.
    """
    try:
        use_kafka_config(kafka_config)
        report = check_history(kafka, prefix, timeout)
    except (CheckerError, KafkaUnavailable, KafkaConfigError) as exc:
        err_console.print("[bold red]error:[/bold red]", Text(str(exc)), highlight=False)
        raise typer.Exit(EXIT_CANNOT_CHECK) from None
    if output is Output.JSON:
        print(json.dumps(report.to_dict(max_problems), indent=2))
    else:
        _print_table(report, prefix, max_problems)
    if not report.ok:
        raise typer.Exit(EXIT_PROBLEMS)


def _print_table(report: CheckReport, prefix: str, max_problems: int) -> None:
    counts = Table("", "", title=f"History of [bold]{prefix}[/bold]", title_justify="left", show_header=False)
    rows = [("runs", report.runs), ("events", report.events), ("open runs", report.open_runs),
            *((f"closed {status}", n) for status, n in sorted(report.closed_runs.items())),
            ("deleted runs", report.deleted_runs), ("problems", len(report.problems))]
    for label, n in rows:
        counts.add_row(label, str(n))
    console.print(counts)
    if report.ok:
        console.print("[green]history ok[/green]: " + report.summary())
        return
    # One line per problem, never folded: they are for grep and copy-paste more than for reading in a table.
    console.print(f"[bold]Problems[/bold] ({len(report.problems)})")
    for p in report.problems[:max_problems]:
        console.print(Text(f"  {p}"))
    hidden = len(report.problems) - max_problems
    if hidden > 0:
        console.print(f"... and {hidden} more (--max-problems, or --output json)")
    console.print("[red]history has problems[/red]: " + report.summary())
