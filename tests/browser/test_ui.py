"""The web UI (issue 20) in a real Chromium (Debian's package), driven by Playwright, against a real server, broker
and SDK worker. Screenshots of the main pages go to `build/ui-screenshots/` (git-ignored).

Chromium missing is a failure, not a skip: `.ci/run` installs it (`apt-get install chromium`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright

from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas.keys import shard_for
from ostinato.services.admin.cluster import init_cluster
from ostinato.services.frontend.ui.pages import CHAIN_LIMIT
from tests.browser.ui_app import NOBODY, QUEUE, VERSIONED_QUEUE
from tests.conftest import run_cli
from tests.tools.servers import ServerProcess, two_servers

CHROMIUM = os.environ.get("OSTINATO_CHROMIUM", "/usr/bin/chromium")
# What this machine's Chromium needs headless as root, with no network beyond loopback (polyglot.md).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "ui-screenshots"
SHARDS = 2
WAIT_MS = 45_000  # how long a locator may wait for the page to show something (visibility lags, runs take steps)

expect.set_options(timeout=WAIT_MS)


def call(url: str, method: str = "GET", body: Any = None, token: str = "") -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def start_parcel(server: ServerProcess, token: str = "", prefix: str = "parcel") -> str:
    workflow_id = f"{prefix}-{uuid.uuid4().hex[:6]}"
    status, body = call(f"{server.url}/api/v1/namespaces/default/workflows", "POST", {
        "workflow_id": workflow_id, "workflow_type": "Parcel", "task_queue": QUEUE, "input": [{"id": workflow_id}]},
        token)
    assert status == 201, body
    return workflow_id


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (`apt-get install -y chromium`; .ci/run does)")
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1366, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the actions' confirmations
    try:
        yield page
    finally:
        context.close()


@pytest.fixture(scope="module")
def served(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server (auth off) and an SDK worker for the Parcel workflow."""
    prefix = f"ui{uuid.uuid4().hex[:8]}"
    init_cluster(kafka.bootstrap, prefix, shards=SHARDS)
    home: Path = tmp_path_factory.mktemp("ui")
    server = ServerProcess(kafka.bootstrap, prefix, home / "data", home / "server.log").start()
    workers: list[subprocess.Popen[bytes]] = []
    try:
        server.wait_owning(SHARDS)
        with (home / "worker.log").open("ab") as log:
            for target in ("tests.browser.ui_app:worker", "tests.browser.ui_app:versioned_worker"):
                workers.append(subprocess.Popen([sys.executable, "-m", "ostinato", "worker", target, "--server",
                                                 server.url], stdout=log, stderr=subprocess.STDOUT))
        yield server
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(30)
        server.stop()


def test_the_list_filters_by_status_and_query_and_shows_a_bad_query_as_the_api_words_it(
        served: ServerProcess, page: Page) -> None:
    kept, ended = start_parcel(served, prefix="kept"), start_parcel(served, prefix="ended")
    assert call(f"{served.url}/api/v1/namespaces/default/workflows/{ended}/terminate", "POST",
                {"reason": "test"})[0] == 200
    page.goto(served.url + "/")
    expect(page).to_have_url(f"{served.url}/ui/namespaces/default/workflows")
    expect(page.get_by_role("link", name=kept)).to_be_visible()
    expect(page.get_by_role("link", name=ended)).to_be_visible()  # auto-refresh brings the late visibility record
    expect(page.locator("#token-dialog")).not_to_be_visible()  # auth is off: no token asked for
    page.screenshot(path=str(SCREENSHOTS / "workflows.png"), full_page=True)

    page.locator(".chip.status-terminated").click()
    expect(page).to_have_url(f"{served.url}/ui/namespaces/default/workflows?query=&status=Terminated")
    expect(page.get_by_role("link", name=ended)).to_be_visible()
    expect(page.get_by_role("link", name=kept)).to_have_count(0)
    expect(page.locator(".chip.on")).to_contain_text("Terminated")

    page.locator(".chips a").first.focus()  # back to every status, from the keyboard
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{served.url}/ui/namespaces/default/workflows?query=")
    page.get_by_label("Query").fill(f"WorkflowId = '{kept}'")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("link", name=kept)).to_be_visible()
    expect(page.get_by_role("link", name=ended)).to_have_count(0)
    expect(page.locator(".chip").first).to_contain_text("All 1")

    bad = "WorkflowType = "
    status, refusal = call(f"{served.url}/api/v1/namespaces/default/workflows?query="
                           f"{urllib.request.quote(bad)}")
    assert status == 400 and refusal["code"] == "invalid_query"
    page.get_by_label("Query").fill(bad)
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#workflows .error")).to_be_visible()
    expect(page.locator("#workflows .error .message")).to_have_text(refusal["message"])


def test_a_run_shows_its_pending_activity_and_history_answers_a_query_and_finishes_on_a_signal(
        served: ServerProcess, page: Page, tmp_path: Path) -> None:
    workflow_id = start_parcel(served)
    page.goto(f"{served.url}/ui/namespaces/default/workflows/{workflow_id}")
    expect(page.locator("#run-status")).to_have_text("RUNNING")
    activity = page.locator("#pending-activities tbody tr")
    expect(activity).to_contain_text("weigh")
    expect(activity).to_contain_text(NOBODY)
    expect(page.locator("#history-table")).to_contain_text("WORKFLOW_EXECUTION_STARTED")
    expect(page.locator("#history-table")).to_contain_text("ACTIVITY_TASK_SCHEDULED")
    first = page.locator("#history-table tr.event").first
    first.locator("summary").focus()  # expand the started event to its whole payload, from the keyboard
    page.keyboard.press("Enter")
    expect(first.locator("details")).to_have_attribute("open", "")
    expect(first.locator("pre")).to_contain_text(f'"id": "{workflow_id}"')
    expect(page.locator("#history .timeline")).to_contain_text("weigh")
    page.screenshot(path=str(SCREENSHOTS / "run.png"), full_page=True)

    page.locator("#query-type").fill("where")
    page.get_by_role("button", name="Ask", exact=True).click()
    expect(page.locator("#query-answer")).to_have_text('"in the depot"')

    page.locator("#signal-name").fill("deliver")
    page.locator("#signal-args").fill('["dock 7"]')
    page.get_by_role("button", name="Send signal").click()
    expect(page.locator("#action-result")).to_contain_text("Signal sent")
    expect(page.locator("#run-status")).to_have_text("COMPLETED")  # the run part refreshes while the run runs
    expect(page.locator("#run-result")).to_contain_text('"delivered_to": "dock 7"')
    expect(page.locator("#history-table")).to_contain_text("WORKFLOW_EXECUTION_COMPLETED")  # reloaded at the close
    page.get_by_role("button", name="Reload history").click()
    expect(page.locator("#history-table tr.event").last).to_contain_text("WORKFLOW_EXECUTION_COMPLETED")

    with page.expect_download() as download:
        page.get_by_role("button", name="Download history JSON").click()
    saved = tmp_path / "history.json"
    download.value.save_as(saved)
    assert json.loads(saved.read_text())["workflow_id"] == workflow_id
    replayed = run_cli("replay", "tests.browser.ui_app:WORKFLOWS", str(saved), "-o", "json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


def test_an_update_asks_first_then_shows_its_result_or_why_it_was_rejected(served: ServerProcess,
                                                                          page: Page) -> None:
    workflow_id = start_parcel(served)
    asked: list[str] = []
    page.on("dialog", lambda dialog: asked.append(dialog.message))
    page.goto(f"{served.url}/ui/namespaces/default/workflows/{workflow_id}")
    expect(page.locator("#run-status")).to_have_text("RUNNING")
    page.locator("#update-name").fill("redirect")
    page.locator("#update-args").fill('""')
    page.get_by_role("button", name="Send update").click()
    expect(page.locator("#update-failure")).to_contain_text("a redirect needs an address")
    assert asked and asked[0].startswith("Send this update")
    page.locator("#update-args").fill('["the porch"]')
    page.get_by_role("button", name="Send update").click()
    expect(page.locator("#update-answer")).to_have_text('"redirected to the porch"')
    expect(page.locator("#run-status")).to_have_text("COMPLETED")
    expect(page.locator("#history-table")).to_contain_text("WORKFLOW_EXECUTION_UPDATE_COMPLETED")


def test_terminate_asks_first_and_shows_the_reason(served: ServerProcess, page: Page) -> None:
    workflow_id = start_parcel(served)
    asked: list[str] = []
    page.on("dialog", lambda dialog: asked.append(dialog.message))
    page.goto(f"{served.url}/ui/namespaces/default/workflows/{workflow_id}")
    expect(page.locator("#run-status")).to_have_text("RUNNING")
    page.locator("#terminate-reason").fill("wrong address")
    page.get_by_role("button", name="Terminate", exact=True).click()
    expect(page.locator("#action-result")).to_contain_text("Terminated.")
    assert asked and asked[0].startswith("Terminate")
    expect(page.locator("#run-status")).to_have_text("TERMINATED")
    expect(page.locator("#run-reason")).to_have_text("wrong address")
    status, outcome = call(f"{served.url}/api/v1/namespaces/default/workflows/{workflow_id}/result?timeout_ms=5000")
    assert status == 200 and outcome["status"] == "TERMINATED" and outcome["reason"] == "wrong address"


def start(server: ServerProcess, workflow_type: str, args: list[Any], prefix: str) -> str:
    workflow_id = f"{prefix}-{uuid.uuid4().hex[:6]}"
    status, body = call(f"{server.url}/api/v1/namespaces/default/workflows", "POST", {
        "workflow_id": workflow_id, "workflow_type": workflow_type, "task_queue": QUEUE, "input": args})
    assert status == 201, body
    return workflow_id


def test_a_run_lists_its_finished_children_with_their_status_and_links_to_them(
        served: ServerProcess, page: Page) -> None:
    workflow_id = start(served, "Household", [["dishes", "ironing", "laundry"]], "household")
    status, outcome = call(f"{served.url}/api/v1/namespaces/default/workflows/{workflow_id}/result?timeout_ms=60000")
    assert status == 200 and outcome["status"] == "COMPLETED", outcome
    history = f"{served.url}/api/v1/namespaces/default/workflows/{workflow_id}/history?filter=children"
    status, page_one = call(history + "&page_size=4")  # the API's filter: only child events, paged by their count
    assert status == 200 and len(page_one["events"]) == 4 and page_one["next_page_token"], page_one
    status, page_two = call(f"{history}&page_size=100&next_page_token={page_one['next_page_token']}")
    kinds = [e["event_type"] for e in page_one["events"] + page_two["events"]]
    assert status == 200 and page_two["next_page_token"] == "" and len(kinds) == 9, kinds
    assert kinds.count("START_CHILD_WORKFLOW_EXECUTION_INITIATED") == 3 and "CHILD_WORKFLOW_EXECUTION_FAILED" in kinds
    page.goto(f"{served.url}/ui/namespaces/default/workflows/{workflow_id}")
    expect(page.locator("#run-status")).to_have_text("COMPLETED")
    rows = page.locator("#children tbody tr")
    expect(rows).to_have_count(3)
    for n, (chore, state) in enumerate((("dishes", "COMPLETED"), ("ironing", "FAILED"), ("laundry", "COMPLETED"))):
        expect(rows.nth(n)).to_contain_text(f"{workflow_id}-{chore}")
        expect(rows.nth(n).locator(".status")).to_have_text(state)
        expect(rows.nth(n)).to_contain_text("Chore")
    expect(rows.nth(1)).to_contain_text("the iron is broken")
    expect(page.locator("#pending-children")).to_have_count(0)  # nothing of them is pending any more
    page.screenshot(path=str(SCREENSHOTS / "run-children.png"), full_page=True)

    page.get_by_role("link", name=f"{workflow_id}-ironing").click()
    expect(page).to_have_url(re.compile(rf"/workflows/{workflow_id}-ironing\?run_id=.+"))
    expect(page.locator("#run-status")).to_have_text("FAILED")
    expect(page.get_by_role("link", name=workflow_id, exact=True)).to_be_visible()  # the parent, linked back


def test_a_running_parent_shows_its_child_finish_while_it_runs_on(served: ServerProcess, page: Page) -> None:
    workflow_id = start(served, "Nursery", [], "nursery")
    page.goto(f"{served.url}/ui/namespaces/default/workflows/{workflow_id}")
    row = page.locator("#children tbody tr")
    expect(row.locator(".status")).to_have_text("RUNNING")
    expect(page.locator("#pending-children")).to_contain_text(f"{workflow_id}-parcel")
    assert call(f"{served.url}/api/v1/namespaces/default/workflows/{workflow_id}-parcel/signal", "POST",
                {"signal_name": "deliver", "input": ["the porch"]})[0] == 200
    expect(row.locator(".status")).to_have_text("COMPLETED")  # the page follows the child's close by itself
    expect(page.locator("#pending-children")).to_have_count(0)
    expect(page.locator("#run-status")).to_have_text("RUNNING")  # the parent runs on
    assert call(f"{served.url}/api/v1/namespaces/default/workflows/{workflow_id}/signal", "POST",
                {"signal_name": "close"})[0] == 200
    expect(page.locator("#run-status")).to_have_text("COMPLETED")


def test_a_run_that_continued_as_new_twice_shows_its_chain_both_ways(served: ServerProcess, page: Page) -> None:
    workflow_id = start(served, "Relay", [0, 2], "relay")
    status, outcome = call(f"{served.url}/api/v1/namespaces/default/workflows/{workflow_id}/result?timeout_ms=60000")
    assert status == 200 and outcome["status"] == "COMPLETED", outcome
    page.goto(f"{served.url}/ui/namespaces/default/workflows/{workflow_id}")  # the current run: the last leg
    expect(page.locator("#run-status")).to_have_text("COMPLETED")
    chain = page.locator("#chain-runs li")
    expect(chain).to_have_count(3)
    expect(chain.nth(0).locator(".status")).to_have_text("CONTINUED_AS_NEW")
    expect(chain.nth(1).locator(".status")).to_have_text("CONTINUED_AS_NEW")
    expect(chain.nth(2)).to_contain_text("(this run)")
    expect(chain.nth(2).locator(".status")).to_have_text("COMPLETED")
    page.screenshot(path=str(SCREENSHOTS / "run-chain.png"), full_page=True)

    first_run = chain.nth(0).locator("a").inner_text()
    chain.nth(0).locator("a").click()  # the first run: the chain now runs on after it
    expect(page).to_have_url(re.compile(rf"run_id={first_run}$"))
    expect(page.locator("#run-status")).to_have_text("CONTINUED_AS_NEW")
    expect(page.locator("#chain-runs li").nth(0)).to_contain_text("(this run)")
    expect(page.locator("#chain-runs li")).to_have_count(3)
    expect(page.locator("#chain-runs li").nth(2).locator(".status")).to_have_text("COMPLETED")
    page.locator("#chain-runs li").nth(1).locator("a").click()  # the middle leg: one run each way
    expect(page.locator("#chain-runs li").nth(1)).to_contain_text("(this run)")
    expect(page.locator("#run-status")).to_have_text("CONTINUED_AS_NEW")
    expect(page.locator("#history-table")).to_contain_text("WORKFLOW_EXECUTION_CONTINUED_AS_NEW")

    longer = start(served, "Relay", [0, CHAIN_LIMIT + 1], "long-relay")  # 22 runs: one more than the page walks
    status, outcome = call(f"{served.url}/api/v1/namespaces/default/workflows/{longer}/result?timeout_ms=60000")
    assert status == 200 and outcome["status"] == "COMPLETED", outcome
    page.goto(f"{served.url}/ui/namespaces/default/workflows/{longer}")
    expect(page.locator("#chain-runs li .status")).to_have_count(CHAIN_LIMIT + 1)
    expect(page.locator("#chain-more-before")).to_contain_text("Older runs continue before these")


def test_the_cluster_page_shows_the_broker_and_lag_figures(served: ServerProcess, page: Page) -> None:
    page.goto(f"{served.url}/ui/cluster")
    host, port = served.bootstrap.split(",")[0].rsplit(":", 1)
    broker = page.locator("#brokers tbody tr")
    expect(broker).to_have_count(1)
    expect(broker).to_contain_text(f"{host}:{port}")
    expect(broker).to_contain_text("controller")
    expect(broker.locator("td").nth(3)).to_have_text("yes")
    for shard in range(SHARDS):
        expect(page.locator(f"#owners tr[data-shard='{shard}'] td.lag")).to_have_text(re.compile(r"^\d+$"))
    expect(page.locator("#visibility-lag")).to_contain_text(re.compile(r"SQLite visibility store is \d+ offsets? "
                                                                       r"behind"))
    expect(page.locator("#visibility-partitions tbody tr")).to_have_count(SHARDS)


def test_task_queue_namespaces_and_cluster_pages(served: ServerProcess, page: Page) -> None:
    page.goto(f"{served.url}/ui/cluster")
    expect(page.locator("#owners tbody tr")).to_have_count(SHARDS)
    expect(page.locator("#owners")).to_contain_text(served.url)
    page.screenshot(path=str(SCREENSHOTS / "cluster.png"), full_page=True)
    page.get_by_role("link", name="Namespaces").click()
    expect(page.locator("#namespace-list")).to_contain_text("default")
    page.get_by_label("Task queue").fill(QUEUE)
    page.get_by_label("Task queue").press("Enter")
    expect(page).to_have_url(f"{served.url}/ui/namespaces/default/task-queues/{QUEUE}")
    expect(page.locator("#task-queue-kinds")).to_contain_text("workflow")
    expect(page.locator("main")).not_to_contain_text("No worker is in the queue's group")
    page.goto(f"{served.url}/ui/namespaces/default/workflows/no-such-parcel")
    expect(page.locator("#run .error")).to_contain_text("no workflow 'no-such-parcel'")  # the API's 404, in place


def test_a_queue_shows_its_builds_and_a_run_its_versioning(served: ServerProcess, page: Page) -> None:
    """Worker versioning in the UI: the task queue page shows the current and ramping build with the drain query;
    a run answered by the versioned worker shows its behaviour and build."""
    base = f"{served.url}/api/v1/namespaces/default/task-queues/{VERSIONED_QUEUE}/versioning"
    assert call(base, "POST", {"current_build": "ui-v1"})[0] == 200
    status, body = call(base, "POST", {"ramping_build": "ui-v2", "ramping_percentage": 0.01})
    assert status == 200 and body["ramping_build"] == "ui-v2", body
    workflow_id = "ui-versioned-" + uuid.uuid4().hex[:6]
    status, body = call(f"{served.url}/api/v1/namespaces/default/workflows", "POST", {
        "workflow_id": workflow_id, "workflow_type": "Parcel", "task_queue": VERSIONED_QUEUE,
        "input": [{"id": "versioned"}]})
    assert status == 201, body
    page.goto(f"{served.url}/ui/namespaces/default/task-queues/{VERSIONED_QUEUE}")
    expect(page.locator("#task-queue-versioning")).to_contain_text("ui-v1")
    expect(page.locator("#task-queue-versioning")).to_contain_text("ui-v2")
    page.get_by_role("link", name="Running runs pinned to build ui-v1").click()
    expect(page).to_have_url(re.compile(r"BuildIds"))
    page.goto(f"{served.url}/ui/namespaces/default/workflows/{workflow_id}")
    expect(page.locator("#run-versioning")).to_contain_text("AUTO_UPGRADE; last task by build ui-v1")
    page.screenshot(path=str(SCREENSHOTS / "versioning.png"), full_page=True)


def test_with_auth_on_the_ui_asks_for_a_token_and_the_api_roles_apply(
        kafka: KafkaCluster, page: Page, tmp_path: Path) -> None:
    prefix = f"ua{uuid.uuid4().hex[:8]}"
    init_cluster(kafka.bootstrap, prefix, shards=1)
    config = tmp_path / "auth.json"
    config.write_text(json.dumps({"tokens": {"r-token": {"default": "reader"}, "w-token": {"*": "writer"}}}))
    server = ServerProcess(kafka.bootstrap, prefix, tmp_path / "data", tmp_path / "server.log",
                           extra_args=("--auth-config", str(config))).start()
    try:
        server.wait_owning(1)
        workflow_id = start_parcel(server, token="w-token")
        page.goto(f"{server.url}/ui/namespaces/default/workflows")
        dialog = page.locator("#token-dialog")
        expect(dialog).to_be_visible()
        expect(dialog).to_contain_text("send Authorization: Bearer <token>")  # the API's own words
        page.locator("#token-input").fill("not-a-token")
        page.get_by_role("button", name="Use this token").click()
        expect(dialog).to_be_visible()
        expect(dialog).to_contain_text("unknown token")
        page.locator("#token-input").fill("r-token")
        page.get_by_role("button", name="Use this token").click()
        expect(page.get_by_role("link", name=workflow_id)).to_be_visible()
        expect(dialog).not_to_be_visible()

        page.get_by_role("link", name=workflow_id).click()
        expect(page.locator("#run-status")).to_have_text("RUNNING")
        page.locator("#terminate-reason").fill("a reader may not")
        page.get_by_role("button", name="Terminate", exact=True).click()
        expect(page.locator("#flash")).to_contain_text("this token is a reader of 'default'; writer is needed")
        assert call(f"{server.url}/api/v1/namespaces/default/workflows/{workflow_id}", token="w-token")[1][
            "status"] == "RUNNING"

        # Each of these reloads the page: wait for the new one, or the fill may land on the page being left.
        with page.expect_navigation():
            page.get_by_role("button", name="Sign out").click()
        expect(dialog).to_be_visible()
        page.locator("#token-input").fill("w-token")
        with page.expect_navigation():
            page.get_by_role("button", name="Use this token").click()
        page.locator("#terminate-reason").fill("a writer may")
        page.get_by_role("button", name="Terminate", exact=True).click()
        expect(page.locator("#run-status")).to_have_text("TERMINATED")
    finally:
        server.stop()


def test_a_run_owned_by_another_server_is_read_through_its_redirect_with_the_token(
        kafka: KafkaCluster, page: Page, tmp_path: Path) -> None:
    """The UI reads through the API, so a run whose shard the other server owns is redirected there, and the
    user's token goes along (a redirect across origins would drop it if the UI left that to aiohttp)."""
    prefix = f"ur{uuid.uuid4().hex[:8]}"
    init_cluster(kafka.bootstrap, prefix, shards=2)
    config = tmp_path / "auth.json"
    config.write_text(json.dumps({"tokens": {"w-token": {"*": "writer"}}}))
    with two_servers(kafka.bootstrap, prefix, tmp_path, extra_args=("--auth-config", str(config))) as (a, b):
        elsewhere = set(b.wait_owning(1)) - set(a.wait_owning(1))
        assert elsewhere, "each server owns a shard of its own"
        workflow_id = next(wf for wf in (f"far-{i}" for i in range(1000))
                           if shard_for("default", wf, 2) in elsewhere)
        status, body = call(f"{b.url}/api/v1/namespaces/default/workflows", "POST", {
            "workflow_id": workflow_id, "workflow_type": "Parcel", "task_queue": QUEUE, "input": [{"id": 1}]},
            "w-token")
        assert status == 201, body
        page.goto(f"{a.url}/ui/namespaces/default/workflows/{workflow_id}")
        page.locator("#token-input").fill("w-token")
        page.get_by_role("button", name="Use this token").click()
        expect(page.locator("#run-status")).to_have_text("RUNNING")
        expect(page.locator("#history-table")).to_contain_text("WORKFLOW_EXECUTION_STARTED")
        page.locator("#terminate-reason").fill("from the other server")
        page.get_by_role("button", name="Terminate", exact=True).click()
        expect(page.locator("#run-status")).to_have_text("TERMINATED")


def test_runs_held_by_processor_processes_are_read_through_the_relay(
        kafka: KafkaCluster, page: Page, tmp_path: Path) -> None:
    """With `--processor-mode process` no store is in the server's own process: the UI's reads go through the API,
    which relays them to the processor process owning the shard."""
    prefix = f"up{uuid.uuid4().hex[:8]}"
    init_cluster(kafka.bootstrap, prefix, shards=2)
    server = ServerProcess(kafka.bootstrap, prefix, tmp_path / "data", tmp_path / "server.log",
                           extra_args=("--processors", "2", "--processor-mode", "process")).start()
    try:
        server.wait_owning(2)
        for shard in (0, 1):  # one run on each processor process's shard
            workflow_id = next(wf for wf in (f"relayed-{uuid.uuid4().hex[:6]}" for _ in range(1000))
                               if shard_for("default", wf, 2) == shard)
            status, body = call(f"{server.url}/api/v1/namespaces/default/workflows", "POST", {
                "workflow_id": workflow_id, "workflow_type": "Parcel", "task_queue": QUEUE, "input": [{"id": 1}]})
            assert status == 201, body
            page.goto(f"{server.url}/ui/namespaces/default/workflows/{workflow_id}")
            expect(page.locator("#run-status")).to_have_text("RUNNING")
            expect(page.locator("#history-table")).to_contain_text("WORKFLOW_TASK_SCHEDULED")
    finally:
        server.stop()
