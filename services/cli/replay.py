"""`ostinato replay`: replay recorded histories against today's workflow code, in bulk, before deploying it.

Histories come from JSON files (as `ostinato.sdk.replayer.save_history` writes them) or from the history topic
itself. The exit status is 1 when any history no longer replays (non-determinism), so it can gate a CI pipeline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ostinato.schemas.topics import DEFAULT_PREFIX
from ostinato.services.cli.kafka_options import KafkaConfigOpt, use_kafka_config

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


def _workflows(target: str) -> list[type]:
    from ostinato.sdk.run import WorkerTargetError, load_target

    try:
        found: Any = load_target(target)
    except WorkerTargetError as exc:
        raise typer.BadParameter(str(exc)) from None
    if isinstance(found, dict):
        found = found.get("workflows", [])
    if isinstance(found, type):
        found = [found]
    if not isinstance(found, list | tuple) or not found:
        raise typer.BadParameter(f"{target} must name a workflow class, a list of them, or Worker options")
    return list(found)


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out.extend(sorted([*path.glob("*.json"), *path.glob("*.avro")]))
        elif path.exists():
            out.append(path)
        else:
            raise typer.BadParameter(f"no such file or directory: {path}")
    return out


def _archived(uri: str) -> list[tuple[str, bytes]]:
    """Every archive file below an s3:// prefix, as (URI, bytes)."""
    from ostinato.connectors.archive import ArchiveError, S3Archive
    from ostinato.sdk.blobstore_s3 import s3_client

    try:
        store = S3Archive.from_uri(s3_client(), uri)
        return [(f"s3://{store.bucket}/{key}", store.get(key)) for key in store.list(store.prefix)
                if key.endswith(".avro")]
    except (ArchiveError, ValueError) as exc:
        raise typer.BadParameter(f"--archive {uri}: {exc}") from None


def replay(
    workflows: Annotated[str, typer.Argument(help="module:attr naming the workflow classes (a list, one class, or "
                                                  "Worker options).")],
    paths: Annotated[list[Path] | None, typer.Argument(help="History JSON files or directories of them.")] = None,
    from_kafka: Annotated[bool, typer.Option("--from-kafka", help="Replay every run in the history topic.")] = False,
    archive: Annotated[list[str] | None, typer.Option(
        "--archive", help="s3://bucket/prefix: replay every archived run (.avro) below it; repeatable. S3 settings "
                          "from OSTINATO_S3_ENDPOINT/_ACCESS_KEY/_SECRET_KEY or boto3's chain.")] = None,
    kafka: Annotated[str, typer.Option("--kafka", envvar="OSTINATO_KAFKA")] = "127.0.0.1:9092",
    kafka_config: KafkaConfigOpt = None,
    prefix: Annotated[str, typer.Option("--prefix", envvar="OSTINATO_TOPIC_PREFIX")] = DEFAULT_PREFIX,
    output: Annotated[str, typer.Option("--output", "-o", help="table or json.")] = "table",
) -> None:
    """Replay histories with today's code; exit 1 if any is non-deterministic."""
    from ostinato.sdk.replayer import Replayer, ReplayResult, load_events

    replayer = Replayer(workflows=_workflows(workflows))
    results: list[tuple[str, ReplayResult]] = []
    skipped = 0
    for path in _files(paths or []):
        if path.suffix == ".avro":
            try:
                results.append((str(path), replayer.replay_archive(path)))
            except ValueError as exc:
                raise typer.BadParameter(f"{path}: {exc}") from None
            continue
        try:
            data = json.loads(path.read_text())
            events = load_events(data["events"])
        except (ValueError, KeyError) as exc:
            raise typer.BadParameter(f"{path} is not a saved history: {exc}") from None
        results.append((str(path), replayer.replay(events, workflow_id=data.get("workflow_id", path.stem),
                                                   run_id=data.get("run_id", ""))))
    for uri in archive or []:
        for name, data in _archived(uri):
            results.append((name, replayer.replay_archive(data)))
    if from_kafka:
        from ostinato.services.admin.checker import check_runs, read_history

        use_kafka_config(kafka_config)
        report = check_runs(read_history(kafka, prefix))
        for (ns, wf, run_id), events in sorted(report.histories.items()):
            if not events or events[0]["attributes"][1]["workflow_type"] not in replayer.definitions:
                skipped += 1
                continue
            results.append((f"{ns}/{wf}/{run_id}", replayer.replay(events, workflow_id=wf, run_id=run_id,
                                                                   namespace=ns)))
    failed = [(name, r) for name, r in results if not r.ok]
    if output == "json":
        print(json.dumps({"replayed": len(results), "failed": len(failed), "skipped_unknown_types": skipped,
                          "failures": [{"history": n, "error": f"{type(r.failure).__name__}: {r.failure}"}
                                       for n, r in failed]}, indent=2))
    else:
        for name, result in failed:  # one line each, whole: names and messages are what people grep for
            console.print(f"[red]non-deterministic[/red] {name}: {type(result.failure).__name__}: {result.failure}",
                          highlight=False)
        console.print(f"{len(results)} histories replayed, {len(failed)} non-deterministic"
                      + (f", {skipped} of workflow types not given skipped" if skipped else ""))
    if not results:
        err_console.print("[yellow]nothing was replayed:[/yellow] give history files, --archive or --from-kafka")
        raise typer.Exit(2)
    if failed:
        raise typer.Exit(1)
