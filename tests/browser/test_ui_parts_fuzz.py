"""The web UI's routes never answer a 5xx to odd input (the API fuzz test covers the OpenAPI document, which
leaves the UI's HTML routes out): generated queries, ids, tokens and action forms, against a real server."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.cluster import init_cluster
from tests.tools.servers import ServerProcess

EXAMPLES = 25
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@pytest.fixture(scope="module")
def server(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    prefix = f"uf{uuid.uuid4().hex[:8]}"
    init_cluster(kafka.bootstrap, prefix, shards=1)
    home: Path = tmp_path_factory.mktemp("ui-fuzz")
    process = ServerProcess(kafka.bootstrap, prefix, home / "data", home / "server.log").start()
    try:
        process.wait_owning(1)
        yield process
    finally:
        process.stop()


def status_of(url: str, form: dict[str, str] | None = None) -> int:
    data = None if form is None else urllib.parse.urlencode(form).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=60) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def seg(text: str) -> str:
    return urllib.parse.quote(text, safe="") or "x"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(query=TEXT, status=st.sampled_from(["", "Running", "Failed", "Nonsense"]), token=TEXT, ns=TEXT)
def test_the_list_part_and_page(server: ServerProcess, query: str, status: str, token: str, ns: str) -> None:
    params = urllib.parse.urlencode({"query": query, "status": status, "next_page_token": token})
    for base in ("/ui", "/ui-parts"):
        assert status_of(f"{server.url}{base}/namespaces/{seg(ns)}/workflows?{params}") < 500


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(wf=TEXT, run_id=TEXT, token=TEXT, what=st.sampled_from(["", "/history", "/history.json", "/children", "/chain"]))
def test_the_run_parts(server: ServerProcess, wf: str, run_id: str, token: str, what: str) -> None:
    params = urllib.parse.urlencode({"run_id": run_id, "next_page_token": token})
    assert status_of(f"{server.url}/ui-parts/namespaces/default/workflows/{seg(wf)}{what}?{params}") < 500
    assert status_of(f"{server.url}/ui/namespaces/default/workflows/{seg(wf)}?{params}") < 500


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(wf=TEXT, action=st.sampled_from(["signal", "query", "update", "cancel", "terminate"]),
       form=st.dictionaries(st.sampled_from(["signal_name", "query_type", "update_name", "args", "reason", "run_id"]),
                            TEXT))
def test_the_actions(server: ServerProcess, wf: str, action: str, form: dict[str, str]) -> None:
    assert status_of(f"{server.url}/ui-parts/namespaces/default/workflows/{seg(wf)}/{action}", form) < 500


def test_task_queue_namespaces_and_cluster_parts(server: ServerProcess) -> None:
    for path in ("/", "/ui/namespaces", "/ui/cluster", "/ui-parts/namespaces", "/ui-parts/cluster",
                 "/ui/namespaces/default/task-queues?task_queue=", "/ui-parts/namespaces/default/task-queues/%20bad",
                 "/ui/static/nothing-here.js"):
        assert status_of(server.url + path) < 500, path
