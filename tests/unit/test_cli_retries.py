"""`ostinato workflow ...` reads across ownership changes, against a real HTTP server (aiohttp, on a thread) scripted
to answer as a cluster whose owner died or whose shard is moving; and options that take JSON refusing invalid JSON
before anything is sent."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp import web
from typer.testing import CliRunner

from ostinato.infra.process import free_ports
from ostinato.services.cli import workflow as cli_workflow
from ostinato.services.cli.main import app as cli

Script = Callable[[web.Request, int], web.StreamResponse]
STATE = {"workflow_id": "wf", "run_id": "r", "workflow_type": "T", "task_queue": "q", "status": "RUNNING"}


class ThreadedApi:
    """An aiohttp server on its own thread and loop: every request is answered by `script` (with how many came
    before), its arrival time, method and body kept."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.arrivals: list[tuple[float, str]] = []
        self.bodies: list[bytes] = []
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.arrivals.append((time.monotonic(), request.method))
        self.bodies.append(await request.read())
        return self.script(request, len(self.arrivals) - 1)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    def __enter__(self) -> ThreadedApi:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._runner is not None
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def unavailable(retry_after: str) -> web.Response:
    return web.json_response({"code": "shard_unavailable", "message": "shard 0 has no reachable owner right now",
                              "details": {"shard": 0}}, status=503, headers={"Retry-After": retry_after})


def redirect(request: web.Request, base: str) -> web.Response:
    return web.Response(status=307, headers={"Location": f"{base}{request.raw_path}?owner_hop=1"})


def dead_url() -> str:
    return f"http://127.0.0.1:{free_ports(1)[0]}"


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def short_retries(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(cli_workflow, "RETRY_S", 1.0)
    yield


def test_a_read_redirected_to_a_dead_owner_asks_again_until_the_new_owner_answers() -> None:
    dead = dead_url()
    with (ThreadedApi(lambda r, n: web.json_response(STATE)) as owner,
          ThreadedApi(lambda r, n: redirect(r, dead if n < 3 else owner.url)) as entry):
        result = run("workflow", "describe", "wf", "-o", "json", "--server", entry.url)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "RUNNING"
    assert len(entry.arrivals) == 4 and len(owner.arrivals) == 1


def test_a_503_is_retried_after_its_retry_after() -> None:
    with ThreadedApi(lambda r, n: unavailable("1") if n == 0 else web.json_response(STATE)) as api:
        result = run("workflow", "describe", "wf", "-o", "json", "--server", api.url)
    assert result.exit_code == 0, result.stderr
    (first, _), (second, _) = api.arrivals
    assert second - first >= 0.95


def test_a_dead_owner_past_the_deadline_exits_2_naming_the_owner(short_retries: None) -> None:
    dead = dead_url()
    with ThreadedApi(lambda r, n: redirect(r, dead)) as entry:
        started = time.monotonic()
        result = run("workflow", "describe", "wf", "--server", entry.url)
        took = time.monotonic() - started
    assert result.exit_code == 2 and 1.0 <= took < 5.0, (result.exit_code, took)
    message = result.stderr
    assert f"the shard's owner at {dead} (where {entry.url} redirected the request) did not answer" in message
    assert "retried for 1s" in message and "Traceback" not in message


def test_a_shard_still_moving_past_the_deadline_shows_the_api_error(short_retries: None) -> None:
    with ThreadedApi(lambda r, n: unavailable("0")) as api:
        result = run("workflow", "result", "wf", "--server", api.url)
    assert result.exit_code == 1
    assert "shard_unavailable: shard 0 has no reachable owner right now" in result.stderr
    assert len(api.arrivals) > 2


def test_an_unreachable_server_fails_at_once() -> None:
    dead = dead_url()
    started = time.monotonic()
    result = run("workflow", "describe", "wf", "--server", dead)
    assert result.exit_code == 2 and time.monotonic() - started < 5
    assert f"cannot reach the Ostinato API at {dead}" in result.stderr


def test_a_command_answered_503_is_not_retried() -> None:
    """A command refused with 503 may still have been applied: the user decides whether to send it again."""
    with ThreadedApi(lambda r, n: web.json_response({"code": "unavailable", "message": "the producer's queue is full",
                                                     "details": {}}, status=503)) as api:
        result = run("workflow", "signal", "wf", "go", "--server", api.url)
    assert result.exit_code == 1 and "unavailable: the producer's queue is full" in result.stderr
    assert [method for _, method in api.arrivals] == ["POST"]


@pytest.mark.parametrize(("verb", "option"), [
    (("workflow", "start", "T", "--id", "wf", "-q", "q"), "--input"),
    (("workflow", "signal", "wf", "go"), "--input"),
    (("workflow", "query", "wf", "state"), "--arg"),
])
@pytest.mark.parametrize("text", ["{bad", "[1, 2", '"unterminated', "  {'single': 'quotes'}"])
def test_json_options_refuse_text_that_looks_like_json_but_does_not_parse(verb: tuple[str, ...], option: str,
                                                                         text: str) -> None:
    with ThreadedApi(lambda r, n: web.json_response({})) as api:
        result = run(*verb, option, text, "--server", api.url)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "looks like JSON but is not valid JSON" in " ".join(result.stderr.replace("│", " ").split())
    assert api.arrivals == []  # refused before anything was sent


def test_json_options_send_json_and_bare_words_as_strings() -> None:
    started = {"workflow_id": "wf", "run_id": "r", "started": True}
    with ThreadedApi(lambda r, n: web.json_response(started, status=201)) as api:
        result = run("workflow", "start", "T", "--id", "wf", "-q", "q", "-i", "Ada", "-i", '"{not json}"', "-i",
                     '{"n": 1}', "-i", "[1]", "-i", "7", "-i", "1.2.3", "--server", api.url)
    assert result.exit_code == 0, result.stderr
    (body,) = api.bodies
    assert json.loads(body)["input"] == ["Ada", "{not json}", {"n": 1}, [1], 7, "1.2.3"]
