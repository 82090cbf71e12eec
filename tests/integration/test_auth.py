"""Bearer tokens and roles on a real server: readers read, writers write, strangers are turned away."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from ostinato.client import Client, WorkflowExecutionStatus
from ostinato.exceptions import RPCError
from ostinato.infra.kafka import KafkaCluster
from ostinato.sdk.batch import BatchTerminate
from ostinato.services.admin.cluster import init_cluster
from tests.tools.servers import ServerProcess


def _call(url: str, method: str, token: str | None, body: Any = None) -> int:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method, headers=headers),
                                    timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_tokens_and_roles(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=1)
    config = tmp_path / "auth.json"
    config.write_text(json.dumps({"tokens": {"r-token": {"default": "reader"}, "w-token": {"*": "writer"},
                                             "a-token": {"*": "admin"}}}))
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log",
                           extra_args=("--auth-config", str(config))).start()
    try:
        server.wait_owning(1)  # the cluster route stays open
        base = f"{server.url}/api/v1/namespaces/default/workflows"
        start = {"workflow_id": f"a-{uuid.uuid4().hex[:6]}", "workflow_type": "T", "task_queue": "q"}
        assert _call(base, "POST", None, start) == 401
        assert _call(base, "POST", "nonsense", start) == 401
        assert _call(base, "POST", "r-token", start) == 403
        assert _call(base, "POST", "w-token", start) == 201
        assert _call(f"{base}/{start['workflow_id']}", "GET", "r-token") == 200
        assert _call(f"{server.url}/api/v1/namespaces/other/workflows/x", "GET", "r-token") == 401
        space = {"name": f"ns-{uuid.uuid4().hex[:4]}", "retention_days": 1}
        assert _call(f"{server.url}/api/v1/namespaces", "POST", "w-token", space) == 403
        assert _call(f"{server.url}/api/v1/namespaces", "POST", "a-token", space) == 201

        async def sdk() -> None:
            with_key = await Client.connect(server.url, api_key="w-token")
            await with_key.get_workflow_handle(start["workflow_id"]).signal("poke")
            await with_key.service.close()  # type: ignore[attr-defined]
            without = await Client.connect(server.url)
            try:
                await without.get_workflow_handle(start["workflow_id"]).signal("poke")
                raise AssertionError("a signal without a token was accepted")
            except RPCError as exc:
                assert exc.status == 401
            finally:
                await without.service.close()  # type: ignore[attr-defined]

        async def batch() -> None:
            """The server's own batch worker calls the API with its internal token, so a job runs under auth."""
            client = await Client.connect(server.url, api_key="w-token")
            query = f"WorkflowId = '{start['workflow_id']}' AND ExecutionStatus = 'Running'"
            for _ in range(300):  # the visibility feeder indexes the run within a second or two
                if await client.count_workflows(query) == 1:
                    break
                await asyncio.sleep(0.1)
            job = await client.start_batch_operation(query, BatchTerminate("under auth"),
                                                     job_id=f"job-{uuid.uuid4().hex[:6]}")
            described = await asyncio.wait_for(job.result(), 60)
            assert (described.state, described.done, described.failed) == ("COMPLETED", 1, 0)
            status = (await client.get_workflow_handle(start["workflow_id"]).describe()).status
            assert status == WorkflowExecutionStatus.TERMINATED

        asyncio.run(sdk())
        asyncio.run(batch())
    finally:
        server.stop()


def test_a_bad_auth_config_is_refused_clearly(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    from tests.conftest import run_cli

    init_cluster(kafka.bootstrap, topic_prefix, shards=1)
    bad = tmp_path / "auth.json"
    bad.write_text(json.dumps({"tokens": {"t": {"default": "superuser"}}}))
    done = run_cli("server", "--kafka", kafka.bootstrap, "--prefix", topic_prefix, "--auth-config", str(bad),
                   "--port", "0")
    assert done.returncode == 1 and "superuser" in done.stderr and "Traceback" not in done.stderr


def test_the_api_over_tls(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    import datetime
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                         serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    init_cluster(kafka.bootstrap, topic_prefix, shards=1)
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log",
                           extra_args=("--tls-cert", str(tmp_path / "cert.pem"), "--tls-key",
                                       str(tmp_path / "key.pem"))).start()
    context = ssl.create_default_context(cafile=str(tmp_path / "cert.pem"))
    context.check_hostname = False
    try:
        import time

        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{server.port}/api/v1/cluster", context=context,
                                            timeout=5) as resp:
                    assert json.loads(resp.read())["topic_prefix"] == topic_prefix
                    break
            except (urllib.error.URLError, ConnectionError):
                server.check_alive()
                assert time.monotonic() < deadline, server.tail()
                time.sleep(0.3)
    finally:
        server.stop()
