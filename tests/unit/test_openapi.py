"""The OpenAPI document and the server's routes describe the same API."""

from __future__ import annotations

from pathlib import Path

from ostinato.schemas.cluster import ClusterSettings
from ostinato.services.frontend.api import install as install_api
from ostinato.services.frontend.batch_api import install as install_batch_api
from ostinato.services.frontend.gateway import CommandGateway
from ostinato.services.frontend.namespaces_api import Namespaces
from ostinato.services.frontend.namespaces_api import install as install_namespaces
from ostinato.services.frontend.openapi import spec
from ostinato.services.frontend.rate_limits_api import install as install_rate_limits
from ostinato.services.frontend.schedules_api import install as install_schedules
from ostinato.services.frontend.visibility_api import install as install_visibility
from ostinato.services.server import ServerContext, create_app

SETTINGS = ClusterSettings("p", 2, 1, 8, 0, "test")


def _routes(tmp_path: Path) -> set[tuple[str, str]]:
    app = create_app(ServerContext("127.0.0.1:1", SETTINGS))
    gateway = CommandGateway("127.0.0.1:1", SETTINGS)  # not started: only its routes are needed
    gateway.install(app)
    install_api(app, gateway)
    install_batch_api(app)
    install_schedules(app)
    install_visibility(app, "127.0.0.1:1", "p", tmp_path / "v.sqlite")  # not started: routes only
    install_namespaces(app, Namespaces(None, gateway, "p", 1))  # type: ignore[arg-type]
    install_rate_limits(app, None, gateway, "p")  # type: ignore[arg-type]
    return {(r.method.lower(), r.resource.canonical) for r in app.router.routes()
            if r.method != "HEAD" and r.resource is not None}


def test_every_route_is_documented_and_every_documented_path_exists(tmp_path: Path) -> None:
    documented = {(method, path) for path, ops in spec()["paths"].items() for method in ops}
    assert documented == _routes(tmp_path)


def test_every_operation_documents_its_errors_with_the_error_model() -> None:
    for path, ops in spec()["paths"].items():
        for method, op in ops.items():
            for status, response in op["responses"].items():
                if status.startswith(("4", "5")):
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}, (method, path, status)


def test_the_cluster_answer_is_what_the_document_says_a_worker_gets() -> None:
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    async def main() -> dict[str, object]:
        async with TestClient(TestServer(create_app(ServerContext("127.0.0.1:1", SETTINGS)))) as client:
            response = await client.get("/api/v1/cluster")
            assert response.status == 200
            body: dict[str, object] = await response.json()
            return body

    answer = asyncio.run(main())
    schema = spec()["paths"]["/api/v1/cluster"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert set(answer) == set(schema["properties"]) == set(schema["required"])
    assert isinstance(answer["kafka_security"], dict)
    assert (answer["shards"], answer["topic_prefix"]) == (SETTINGS.shards, "p")
