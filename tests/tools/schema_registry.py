"""A stand-in for a Confluent-compatible schema registry, on loopback, for tests.

No real registry installs on these machines: Confluent's is not on Maven Central, Karapace is not on PyPI, and
Apicurio Registry's app needs artifacts Maven Central does not serve. This serves the part of the REST API the
ingress and its tests use, with the real API's shapes and error codes: `POST /subjects/{subject}/versions`
(register, the same schema twice gets the same id; `references` kept), `GET /schemas/ids/{id}` (404 with
error_code 40403 when unknown), `GET /subjects/{subject}/versions/{version}` (40401, 40402), optional basic auth
(401), optional TLS. It can be stopped and started again on the same port with the same schemas,
like a registry whose storage outlives it.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import ssl
import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ostinato.infra.process import free_ports


class StandInRegistry:
    def __init__(self, port: int | None = None, user: str = "", password: str = "",
                 tls: tuple[Path, Path] | None = None) -> None:
        self.port = port or free_ports(1)[0]
        self.tls = tls  # (certificate, key) files: serve HTTPS
        self.credentials = f"{user}:{password}" if user else ""
        self.schemas: list[dict[str, Any]] = []  # id - 1 -> {"schema": ..., "schemaType": ..., "references": ...}
        self.subjects: dict[str, list[int]] = {}  # subject -> ids, version - 1 -> id
        self.requests: list[str] = []
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> StandInRegistry:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorised(self) -> bool:
                if not registry.credentials:
                    return True
                expected = "Basic " + base64.b64encode(registry.credentials.encode()).decode()
                if self.headers.get("Authorization") == expected:
                    return True
                self._answer(401, {"error_code": 401, "message": "Unauthorized"})
                return False

            def do_GET(self) -> None:
                registry.requests.append(f"GET {self.path}")
                if not self._authorised():
                    return
                parts = [urllib.parse.unquote(p) for p in self.path.strip("/").split("/")]
                if len(parts) == 4 and parts[0] == "subjects" and parts[2] == "versions" and parts[3].isdigit():
                    ids = registry.subjects.get(parts[1])
                    if ids is None:
                        self._answer(404, {"error_code": 40401, "message": f"Subject '{parts[1]}' not found."})
                    elif not 0 < int(parts[3]) <= len(ids):
                        self._answer(404, {"error_code": 40402, "message": f"Version {parts[3]} not found."})
                    else:
                        schema_id = ids[int(parts[3]) - 1]
                        self._answer(200, {"subject": parts[1], "version": int(parts[3]), "id": schema_id,
                                           **(registry.schema(schema_id) or {})})
                    return
                if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
                    found = registry.schema(int(parts[2]))
                    if found is None:
                        self._answer(404, {"error_code": 40403, "message": f"Schema {parts[2]} not found"})
                    else:
                        self._answer(200, found)
                    return
                self._answer(404, {"error_code": 404, "message": "HTTP 404 Not Found"})

            def do_POST(self) -> None:
                registry.requests.append(f"POST {self.path}")
                if not self._authorised():
                    return
                parts = [urllib.parse.unquote(p) for p in self.path.strip("/").split("/")]
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
                    schema_id = registry.register(body["schema"], body.get("schemaType", "AVRO"), parts[1],
                                                  body.get("references"))
                    self._answer(200, {"id": schema_id})
                    return
                self._answer(404, {"error_code": 404, "message": "HTTP 404 Not Found"})

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, name="stand-in-registry", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def schema(self, schema_id: int) -> dict[str, Any] | None:
        with self._lock:
            return self.schemas[schema_id - 1] if 0 < schema_id <= len(self.schemas) else None

    def register(self, schema: str, schema_type: str = "AVRO", subject: str = "",
                 references: list[dict[str, Any]] | None = None) -> int:
        entry: dict[str, Any] = {"schema": schema}
        if schema_type != "AVRO":
            entry["schemaType"] = schema_type
        if references:
            entry["references"] = references
        with self._lock:
            if entry not in self.schemas:
                self.schemas.append(entry)
            schema_id = self.schemas.index(entry) + 1
            if subject and schema_id not in self.subjects.setdefault(subject, []):
                self.subjects[subject].append(schema_id)
            return schema_id


def register(url: str, subject: str, schema: dict[str, Any] | str, auth: str = "",
             references: list[dict[str, Any]] | None = None) -> int:
    """Register `schema` under `subject` through the registry's HTTP API (any Confluent-compatible registry)."""
    text = schema if isinstance(schema, str) else json.dumps(schema)
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    body: dict[str, Any] = {"schema": text, **({"references": references} if references else {})}
    request = urllib.request.Request(f"{url}/subjects/{urllib.parse.quote(subject, safe='')}/versions",
                                     json.dumps(body).encode(), headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(json.loads(response.read())["id"])


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (its own CA) and its key, as PEM files in `directory`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "registry-cert.pem", directory / "registry-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file
