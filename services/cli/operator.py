"""`ostinato operator search-attribute create|list`: a namespace's custom search attributes (Temporal's
`temporal operator search-attribute create --name CustomerId --type Keyword`)."""

from __future__ import annotations

import json
import urllib.parse
from typing import Annotated

import typer
from rich.table import Table

from ostinato.services.cli.workflow import (
    DEFAULT_SERVER,
    NamespaceOpt,
    OutputOpt,
    ServerOpt,
    _call,
    _run,
    console,
)

app = typer.Typer(help="Operate a namespace: its custom search attributes.", no_args_is_help=True)
search_attribute_app = typer.Typer(help="Custom search attributes: the names and types workflows may set and "
                                        "queries may use.", no_args_is_help=True)
app.add_typer(search_attribute_app, name="search-attribute")
TYPES = "Keyword, Text, Int, Double, Bool, Datetime or KeywordList"


def _path(namespace: str) -> str:
    return f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}/search-attributes"


def _print(found: dict[str, dict[str, str]], output: str) -> None:
    if output == "json":
        print(json.dumps(found, indent=2))
        return
    table = Table("name", "type", "kind", title=f"search attributes of {found['namespace']}")
    for kind in ("custom", "system"):
        for name, sa_type in found[f"{kind}_attributes"].items():
            table.add_row(name, sa_type, kind)
    console.print(table)


@search_attribute_app.command("create")
def create(
    names: Annotated[list[str], typer.Option("--name", help="The attribute's name (repeat with --type).")],
    types: Annotated[list[str], typer.Option("--type", help=f"Its type: {TYPES}.")],
    server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
) -> None:
    """Register custom search attributes in a namespace, e.g. `--name CustomerId --type Keyword --name Total
    --type Double`. Registered again with the same type is a no-op; a type never changes. Once registered, starts
    and `workflow.upsert_search_attributes` may set them and list/count queries may use them; anything else is
    refused."""
    if len(names) != len(types):
        raise typer.BadParameter("give one --type per --name")
    found = _run(lambda: _call(server, "POST", _path(namespace), {"search_attributes": dict(zip(names, types,
                                                                                                 strict=True))}))
    _print(found, output)


@search_attribute_app.command("list")
def list_attributes(server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default",
                    output: OutputOpt = "table") -> None:
    """The namespace's custom search attributes and the built-in ones, with their types."""
    _print(_run(lambda: _call(server, "GET", _path(namespace))), output)


# tctl's older spelling (`tctl admin cluster add-search-attributes`), for scripts that port.
app.command("add-search-attributes", help="The same as `search-attribute create`.")(create)
