"""`ostinato visibility rebuild`: re-index the visibility store from `<prefix>.visibility`, offset 0 onwards."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ostinato.schemas.topics import DEFAULT_PREFIX
from ostinato.services.cli.check import DEFAULT_BOOTSTRAP, KafkaOpt, PrefixOpt
from ostinato.services.cli.kafka_options import KafkaConfigOpt, use_kafka_config

app = typer.Typer(help="The visibility store behind list and count.", no_args_is_help=True)
err_console = Console(stderr=True, soft_wrap=True)


@app.command("rebuild")
def rebuild(
    kafka: KafkaOpt = DEFAULT_BOOTSTRAP,
    kafka_config: KafkaConfigOpt = None,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    opensearch_url: Annotated[str, typer.Option("--opensearch-url", envvar="OSTINATO_OPENSEARCH_URL",
                                                help="The OpenSearch the servers index into.")] = "",
) -> None:
    """Drop the OpenSearch index and index the whole topic again; servers may keep running (writes are
    versioned, so the newest record of a run wins whatever the order)."""
    if not opensearch_url:
        err_console.print(
            "[yellow]no --opensearch-url (or OSTINATO_OPENSEARCH_URL):[/yellow] the embedded SQLite store rebuilds "
            "itself: stop the server, delete <data-dir>/<prefix>/visibility.sqlite and start it again; it replays "
            "the topic from offset 0.")
        raise typer.Exit(2)
    use_kafka_config(kafka_config)
    from ostinato.connectors.visibility_opensearch import (
        OpenSearchUnavailableError,
        OpenSearchVisibilityStore,
        reindex,
    )
    from ostinato.services.frontend.visibility_api import opensearch_index

    store = OpenSearchVisibilityStore(opensearch_url, opensearch_index(prefix))
    columns = (TextColumn("re-indexing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress(*columns, console=err_console, transient=True) as progress:
            task = progress.add_task("reindex", total=None)
            done = reindex(kafka, prefix, store,
                           progress=lambda n, total: progress.update(task, completed=n, total=total))
    except (OpenSearchUnavailableError, RuntimeError) as exc:
        err_console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    finally:
        store.close()
    print(f"re-indexed {done} visibility records of '{prefix}' into {opensearch_index(prefix)} at {opensearch_url}")
