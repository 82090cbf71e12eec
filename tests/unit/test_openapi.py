"""The OpenAPI document and the server's routes describe the same API."""

from __future__ import annotations

from ostinato.schemas.cluster import ClusterSettings
from ostinato.services.api import install as install_api
from ostinato.services.gateway import CommandGateway
from ostinato.services.openapi import spec
from ostinato.services.server import ServerContext, create_app

SETTINGS = ClusterSettings("p", 2, 1, 8, 0, "test")


def _routes() -> set[tuple[str, str]]:
    app = create_app(ServerContext("127.0.0.1:1", SETTINGS))
    gateway = CommandGateway("127.0.0.1:1", SETTINGS)  # not started: only its routes are needed
    gateway.install(app)
    install_api(app, gateway)
    return {(r.method.lower(), r.resource.canonical) for r in app.router.routes()
            if r.method != "HEAD" and r.resource is not None}


def test_every_route_is_documented_and_every_documented_path_exists() -> None:
    documented = {(method, path) for path, ops in spec()["paths"].items() for method in ops}
    assert documented == _routes()


def test_every_operation_documents_its_errors_with_the_error_model() -> None:
    for path, ops in spec()["paths"].items():
        for method, op in ops.items():
            for status, response in op["responses"].items():
                if status.startswith(("4", "5")):
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}, (method, path, status)
