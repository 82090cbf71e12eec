"""The client closes what it opens: `async with` and `close()` release its HTTP session, and a client that is never
closed (Temporal's client has no `close`, so ported code never calls one) leaves no "Unclosed client session"
warning at exit, even with ResourceWarnings made errors. Each program runs in a subprocess against a tiny aiohttp
server standing in for an Ostinato server."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

SERVER = textwrap.dedent("""
    import asyncio, gc, sys
    from aiohttp import web
    from ostinato.client import Client

    async def cluster(request):
        return web.json_response({"kafka_bootstrap": "127.0.0.1:9", "topic_prefix": "ostinato", "shards": 1,
                                  "reply_partitions": 1})

    async def missing(request):
        return web.json_response({"code": "not_found", "message": "no such workflow", "details": {}}, status=404)

    async def serve():
        app = web.Application()
        app.router.add_get("/api/v1/cluster", cluster)
        app.router.add_route("*", "/{tail:.*}", missing)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        return runner, f"http://127.0.0.1:{port}"

    async def call(client):
        try:
            await client.get_workflow_handle("nobody").describe()
        except Exception as error:  # a 404 from the stand-in server: the point is the request
            print(type(error).__name__)
""")

PROGRAMS = {
    # Temporal's usual shape: a client made in main() and dropped when main() returns.
    "dropped": """
        async def main():
            runner, url = await serve()
            client = await Client.connect(url)
            await call(client)
            await runner.cleanup()

        asyncio.run(main())
    """,
    # A client kept in a global, alive after asyncio.run() has closed the loop.
    "kept": """
        CLIENTS = []

        async def main():
            runner, url = await serve()
            CLIENTS.append(await Client.connect(url))
            await call(CLIENTS[0])
            await runner.cleanup()

        asyncio.run(main())
        gc.collect()
    """,
    # A loop closed without shutting its async generators down (not asyncio.run): closed at exit.
    "closed loop": """
        CLIENTS = []

        async def main():
            runner, url = await serve()
            CLIENTS.append(await Client.connect(url))
            await call(CLIENTS[0])
            await runner.cleanup()

        loop = asyncio.new_event_loop()
        loop.run_until_complete(main())
        loop.close()
    """,
    # Dropped while the loop goes on running: closed soon after it is garbage-collected.
    "collected": """
        async def main():
            runner, url = await serve()
            client = await Client.connect(url)
            await call(client)
            session = client.service.session
            del client
            gc.collect()
            for _ in range(100):
                if session.closed:
                    break
                await asyncio.sleep(0.01)
            print("closed" if session.closed else "open")
            await runner.cleanup()

        asyncio.run(main())
    """,
    "async with": """
        async def main():
            runner, url = await serve()
            async with await Client.connect(url) as client:
                await call(client)
            print("closed" if client.service.session.closed else "open")
            client = await Client.connect(url)
            await client.close()
            print("closed" if client.service.session.closed else "open")
            await runner.cleanup()

        asyncio.run(main())
    """,
}


SLOW_CALLBACK = re.compile(r"Executing <.*> took [0-9.]+ seconds$")


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_a_client_leaves_no_unclosed_session_behind(program: str) -> None:
    source = SERVER + textwrap.dedent(PROGRAMS[program])
    done = subprocess.run([sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", source],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # `-X dev` turns on asyncio's debug mode, which also reports callbacks slower than 0.1 s: timing on a loaded
    # machine, not a warning about what the client left behind.
    assert [line for line in done.stderr.splitlines() if not SLOW_CALLBACK.match(line)] == []
    assert "Unclosed" not in done.stdout
    lines = done.stdout.split()
    assert lines[0] == "RPCError"
    assert "open" not in lines
