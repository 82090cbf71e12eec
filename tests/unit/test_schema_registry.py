"""Avro in Confluent's wire format (connectors/schema_registry.py and the ingress mapping's use of it): framing,
decoding, the registry client's caching and auth, and the line between a bad record (a dead letter) and a registry
that is away (retried, never a dead letter)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastavro import parse_schema

from ostinato.connectors import schema_registry
from ostinato.connectors.ingress_mapping import MappingError, Record, Unmappable, parse, prefetch_schemas, translate
from ostinato.connectors.schema_registry import (
    BadRecord,
    RegistryConfigError,
    RegistrySettings,
    RegistryUnavailable,
    SchemaRegistry,
)
from ostinato.infra.process import free_ports
from ostinato.schemas import codec
from tests.tools.schema_registry import StandInRegistry, register, self_signed

ORDER = {"type": "record", "name": "Order", "namespace": "shop",
         "fields": [{"name": "id", "type": "long"}, {"name": "customer", "type": "string"},
                    {"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}}]}
ORDER_KEY = {"type": "record", "name": "OrderKey", "namespace": "shop",
             "fields": [{"name": "region", "type": "string"}]}


@pytest.fixture
def registry() -> Iterator[StandInRegistry]:
    server = StandInRegistry().start()
    yield server
    server.stop()


def _client(url: str, **settings: object) -> SchemaRegistry:
    return SchemaRegistry(RegistrySettings.parse({"url": url, **settings}, Path(), "test"))


def _order(schema_id: int, **changes: object) -> bytes:
    import decimal
    datum = {"id": 7, "customer": "ada", "total": decimal.Decimal("12.50"), **changes}
    return schema_registry.encode(schema_id, parse_schema(ORDER), datum)


def test_a_framed_value_decodes_with_the_writers_schema_fetched_once(registry: StandInRegistry) -> None:
    schema_id = register(registry.url, "shop.orders-value", ORDER)
    client = _client(registry.url)
    for _ in range(3):
        datum = schema_registry.decode(_order(schema_id), client)
    assert datum["id"] == 7 and datum["customer"] == "ada"
    assert registry.requests.count(f"GET /schemas/ids/{schema_id}") == 1  # ids are immutable: cached


@pytest.mark.parametrize(("data", "reason"), [
    (b"", "the value is 0 byte(s), shorter than the 5-byte Confluent header"),
    (b"\x00\x00\x01", "the value is 3 byte(s), shorter than the 5-byte Confluent header"),
    (b'{"id": 7}', "the value is not in the Confluent wire format: its first byte is 0x7b, not the magic byte 0x00"),
    (b"\xc3\x01" + bytes(12), "its first byte is 0xc3"),
])
def test_what_is_not_framed_says_so(data: bytes, reason: str) -> None:
    with pytest.raises(BadRecord, match=reason.replace("(", r"\(").replace(")", r"\)")):
        schema_registry.split_frame(data)


def test_an_unknown_id_truncated_or_corrupt_body_and_trailing_bytes_are_bad_records(
        registry: StandInRegistry) -> None:
    schema_id = register(registry.url, "shop.orders-value", ORDER)
    client = _client(registry.url)
    with pytest.raises(BadRecord, match=r"schema id 99 is not in the schema registry at .* \(404: Schema 99 not"):
        schema_registry.decode(b"\x00\x00\x00\x00\x63" + _order(schema_id)[5:], client)
    with pytest.raises(BadRecord, match=f"the value is truncated or corrupt Avro for schema id {schema_id}"):
        schema_registry.decode(_order(schema_id)[:-3], client)
    with pytest.raises(BadRecord, match=r"1 byte\(s\) after the Avro datum"):
        schema_registry.decode(_order(schema_id) + b"\x00", client)
    json_id = registry.register('{"type": "object"}', "JSON")
    with pytest.raises(BadRecord, match=f"schema id {json_id} is a JSON schema, not Avro"):
        schema_registry.decode(b"\x00" + json_id.to_bytes(4, "big") + b"{}", client)


def test_schema_references_are_resolved_through_their_subjects(registry: StandInRegistry) -> None:
    address = {"type": "record", "name": "Address", "namespace": "shop",
               "fields": [{"name": "city", "type": "string"}]}
    customer = {"type": "record", "name": "Customer", "namespace": "shop",
                "fields": [{"name": "name", "type": "string"}, {"name": "address", "type": "shop.Address"}]}
    order = {"type": "record", "name": "Order", "namespace": "shop",
             "fields": [{"name": "id", "type": "long"}, {"name": "customer", "type": "shop.Customer"}]}
    register(registry.url, "shop.Address", address)
    register(registry.url, "shop.Customer", customer,
             references=[{"name": "shop.Address", "subject": "shop.Address", "version": 1}])
    order_id = register(registry.url, "shop.orders-value", order,
                        references=[{"name": "shop.Customer", "subject": "shop.Customer", "version": 1}])
    named: dict = {}
    parse_schema(address, named_schemas=named)
    parse_schema(customer, named_schemas=named)
    datum = {"id": 1, "customer": {"name": "ada", "address": {"city": "Turin"}}}
    framed = schema_registry.encode(order_id, parse_schema(order, named_schemas=named), datum)
    assert schema_registry.decode(framed, _client(registry.url)) == datum
    missing = register(registry.url, "shop.gifts-value", order,
                       references=[{"name": "shop.Customer", "subject": "shop.Customer", "version": 9}])
    with pytest.raises(BadRecord, match=r"reference shop\.Customer version 9 is not in the schema registry"):
        schema_registry.decode(b"\x00" + missing.to_bytes(4, "big") + framed[5:], _client(registry.url))


def test_an_unknown_id_is_asked_for_once_a_minute_not_once_a_record(registry: StandInRegistry) -> None:
    client = _client(registry.url)
    for _ in range(5):
        with pytest.raises(BadRecord, match="schema id 42 is not in the schema registry"):
            client.schema(42)
    assert registry.requests.count("GET /schemas/ids/42") == 1


def test_a_registry_that_is_away_or_refuses_is_unavailable_not_a_bad_record(registry: StandInRegistry) -> None:
    schema_id = register(registry.url, "shop.orders-value", ORDER)
    down = _client(f"http://127.0.0.1:{free_ports(1)[0]}")
    with pytest.raises(RegistryUnavailable, match="is unavailable"):
        schema_registry.decode(_order(schema_id), down)
    wrong_path = _client(registry.url + "/not-the-api")  # a 404 without the registry's 40403: the URL, not the record
    with pytest.raises(RegistryUnavailable, match="without the registry's error code 40403"):
        schema_registry.decode(_order(schema_id), wrong_path)
    locked = StandInRegistry(user="ingress", password="s3cret").start()
    try:
        locked_id = register(locked.url, "shop.orders-value", ORDER, auth="ingress:s3cret")
        with pytest.raises(RegistryUnavailable, match="answered 401"):
            schema_registry.decode(_order(locked_id), _client(locked.url))
    finally:
        locked.stop()


def test_basic_auth_comes_from_environment_variables(registry: StandInRegistry,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    locked = StandInRegistry(user="ingress", password="s3cret").start()
    try:
        schema_id = register(locked.url, "shop.orders-value", ORDER, auth="ingress:s3cret")
        monkeypatch.setenv("SR_USER", "ingress")
        monkeypatch.setenv("SR_PASSWORD", "s3cret")
        client = _client(locked.url, username_env="SR_USER", password_env="SR_PASSWORD")
        assert schema_registry.decode(_order(schema_id), client)["customer"] == "ada"
    finally:
        locked.stop()


def test_tls_trusts_the_ca_file_named_relative_to_the_ingress_file(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    secure = StandInRegistry(tls=(cert, key)).start()
    try:
        schema_id = secure.register(json.dumps(ORDER))
        trusting = SchemaRegistry(RegistrySettings.parse({"url": secure.url, "ca_file": cert.name}, tmp_path, "t"))
        assert schema_registry.decode(_order(schema_id), trusting)["id"] == 7
        with pytest.raises(RegistryUnavailable, match="CERTIFICATE_VERIFY_FAILED"):  # the system CAs do not know it
            schema_registry.decode(_order(schema_id), _client(secure.url))
    finally:
        secure.stop()


@pytest.mark.parametrize(("entry", "message"), [
    ({"url": "http://r", "password": "x"}, "secrets come from the environment"),
    ({"url": "ftp://r"}, "url must be an http:// or https:// URL"),
    ({"url": "http://r", "username_env": "SR_USER"}, "needs both username_env and password_env"),
    ({"url": "http://r", "username_env": "OSTINATO_UNSET_U", "password_env": "OSTINATO_UNSET_P"}, "which is not set"),
    ({"url": "http://r", "cert_file": "c.pem"}, "needs both cert_file and key_file"),
    ({"url": "http://r", "timeout_s": 0}, "timeout_s must be a positive number"),
    (7, "registry is a URL or a mapping"),
])
def test_registry_settings_mistakes(entry: object, message: str) -> None:
    with pytest.raises(RegistryConfigError, match=message):
        RegistrySettings.parse(entry, Path(), "test")


START = {"name": "orders", "topic": "shop.orders", "action": "start", "workflow_id": "order-{value.id}",
         "workflow_type": "OrderWorkflow", "task_queue": "orders", "format": "avro"}


def _input(command: object) -> object:
    _, decoded = codec.decode(command.value)  # type: ignore[attr-defined]
    return json.loads(decoded["body"][1]["input"][0]["data"])


def test_a_mapping_with_a_registry_reads_confluent_framed_values_and_keys(registry: StandInRegistry) -> None:
    value_id = register(registry.url, "shop.orders-value", ORDER)
    key_id = register(registry.url, "shop.orders-key", ORDER_KEY)
    config = parse({"registry": registry.url, "mappings": [
        {**START, "key_format": "avro", "task_queue": "orders-{key.region}"}]})
    mapping = config.mappings[0]
    key = schema_registry.encode(key_id, parse_schema(ORDER_KEY), {"region": "eu"})
    command = translate(mapping, Record("shop.orders", 0, 3, key, _order(value_id)), 4, 0)
    assert _input(command) == {"id": 7, "customer": "ada", "total": "12.50"}
    _, decoded = codec.decode(command.value)
    assert decoded["workflow_id"] == "order-7" and decoded["body"][1]["task_queue"] == "orders-eu"
    with pytest.raises(Unmappable, match="the key is not in the Confluent wire format"):
        translate(mapping, Record("shop.orders", 0, 4, b"region-eu", _order(value_id)), 4, 0)
    with pytest.raises(Unmappable, match="the value is not in the Confluent wire format"):
        translate(mapping, Record("shop.orders", 0, 5, key, b'{"id": 1}'), 4, 0)


def test_mappings_share_the_files_registry_and_may_name_their_own(registry: StandInRegistry) -> None:
    other = f"http://127.0.0.1:{free_ports(1)[0]}"
    config = parse({"registry": registry.url, "mappings": [
        START, {**START, "name": "b"}, {**START, "name": "c", "registry": {"url": other}}]})
    a, b, c = config.mappings
    assert a.registry is b.registry and a.registry is not None and a.confluent_value
    assert c.registry is not None and c.registry.settings.url == other


@pytest.mark.parametrize(("document", "message"), [
    ({"mappings": [START]}, "format avro needs `schema`"),
    ({"mappings": [{**START, "schema": {"type": "string"}, "registry": "http://r"}]}, "not both"),
    ({"mappings": [{**START, "format": "json", "key_format": "avro"}]}, "key_format avro needs a `registry`"),
    ({"mappings": [{**START, "key_format": "protobuf", "registry": "http://r"}]}, "key_format must be one of"),
    ({"registry": {"url": "http://r", "password": "x"}, "mappings": [START]}, "secrets come from the environment"),
])
def test_mapping_mistakes_about_the_registry(document: dict, message: str) -> None:
    with pytest.raises(MappingError, match=message):
        parse(document)


def test_the_translation_lets_an_outage_through_for_the_runner_to_retry() -> None:
    config = parse({"registry": f"http://127.0.0.1:{free_ports(1)[0]}", "mappings": [START]})
    with pytest.raises(RegistryUnavailable):  # not Unmappable: the runner must not dead-letter it
        translate(config.mappings[0], Record("shop.orders", 0, 0, None, b"\x00\x00\x00\x00\x01\x0e"), 4, 0)


def test_the_schemas_of_a_batch_are_fetched_before_its_transaction(registry: StandInRegistry) -> None:
    """The runner fetches a batch's schemas before it opens a transaction (a slow registry never holds one open):
    each id once, unknown ids and unframed parts left for the translation to report, an outage raised."""
    value_id = register(registry.url, "shop.orders-value", ORDER)
    key_id = register(registry.url, "shop.orders-key", ORDER_KEY)
    mapping = parse({"registry": registry.url, "mappings": [{**START, "key_format": "avro"}]}).mappings[0]
    key = schema_registry.encode(key_id, parse_schema(ORDER_KEY), {"region": "eu"})
    batch = [(key, _order(value_id)), (key, _order(value_id)), (None, b"{}"), (b"k", b"\x00\x00\x00\x00\x2a..")]
    prefetch_schemas(mapping, batch)
    fetched = sorted(r for r in registry.requests if r.startswith("GET"))
    assert fetched == sorted([f"GET /schemas/ids/{value_id}", f"GET /schemas/ids/{key_id}", "GET /schemas/ids/42"])
    registry.requests.clear()
    translate(mapping, Record("shop.orders", 0, 0, key, _order(value_id)), 4, 0)
    assert registry.requests == []  # the translation found them cached
    registry.stop()
    fresh = parse({"registry": registry.url, "mappings": [START]}).mappings[0]
    with pytest.raises(RegistryUnavailable):
        prefetch_schemas(fresh, batch)


def test_waiting_for_the_registry_backs_off_says_so_once_and_says_when_it_is_back(
        caplog: pytest.LogCaptureFixture) -> None:
    import threading

    from ostinato.connectors.registry_wait import MAX_DELAY_S, RegistryWait

    class Figure:
        def __init__(self) -> None:
            self.value = 0.0

        def inc(self, amount: float = 1) -> None:
            self.value += amount

        def set(self, value: float) -> None:
            self.value = value

    retries, waiting, stop = Figure(), Figure(), threading.Event()
    stop.set()  # the waits return at once
    wait = RegistryWait("orders", retries, waiting, stop)
    with caplog.at_level("INFO", logger="ostinato.ingress"):
        delays = []
        for _ in range(8):
            wait.failed(RegistryUnavailable("the schema registry at http://r is unavailable: refused"), "t/0/5")
            delays.append(wait.delay)
        assert delays == [0.2, 0.4, 0.8, 1.6, 3.2, MAX_DELAY_S, MAX_DELAY_S, MAX_DELAY_S]
        assert retries.value == 8 and waiting.value == 1
        wait.succeeded()
    assert waiting.value == 0 and wait.delay == 0
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages  # one when it goes, one when it is back: not one per retry
    assert "nothing is dead-lettered: retrying the batch from t/0/5" in messages[0]
    assert "answers again" in messages[1]
