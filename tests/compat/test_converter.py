"""Temporal's data converter API (temporalio.converter) as Temporal's encryption and custom-converter samples use
it, on both engines (payloads are what travels on the wire and stays in history).

The imports are the only change from Temporal code: `temporalio` -> `ostinato`, and `Payload` comes from
`ostinato.converter` (Temporal's is the protobuf `temporalio.api.common.v1.Payload`, with the same two fields).
A difference this module shows: an `async def` codec must not suspend (payloads are converted inside workflow code).
"""

from __future__ import annotations

import asyncio
import dataclasses
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ostinato import activity, workflow
from ostinato.client import Client
from ostinato.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
    Payload,
    PayloadCodec,
    PayloadConversionError,
    default,
)
from ostinato.worker import Worker
from tests.e2e.sdk_scenarios.envs import ScenarioEnv


@dataclass
class Greeting:
    name: str
    at: datetime


@activity.defn
async def greet(greeting: Greeting) -> Greeting:
    return Greeting(f"Hello, {greeting.name}", greeting.at + timedelta(days=1))


@workflow.defn
class GreetingWorkflow:
    @workflow.run
    async def run(self, greeting: Greeting) -> Greeting:
        return await workflow.execute_activity(greet, greeting, start_to_close_timeout=timedelta(seconds=10))


class CompressionCodec(PayloadCodec):
    """The encryption sample's shape (async encode/decode, its own encoding in metadata), compressing instead."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload(metadata={"encoding": b"binary/zlib", "original-encoding": p.metadata["encoding"]},
                        data=zlib.compress(p.data)) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        ret: list[Payload] = []
        for p in payloads:
            if p.metadata.get("encoding", b"").decode() != "binary/zlib":
                ret.append(p)
                continue
            ret.append(Payload(metadata={"encoding": p.metadata["original-encoding"]}, data=zlib.decompress(p.data)))
        return ret


class GreetingEncodingPayloadConverter(EncodingPayloadConverter):
    """Temporal's custom-converter sample: greetings travel as `name|iso-time` text with an encoding of their own."""

    @property
    def encoding(self) -> str:
        return "text/my-greeting-encoding"

    def to_payload(self, value: Any) -> Payload | None:
        if not isinstance(value, Greeting):
            return None
        return Payload(metadata={"encoding": self.encoding.encode()},
                       data=f"{value.name}|{value.at.isoformat()}".encode())

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        name, at = payload.data.decode().split("|")
        return Greeting(name, datetime.fromisoformat(at))


class GreetingPayloadConverter(CompositePayloadConverter):
    def __init__(self) -> None:
        # Just add ours as first before the defaults
        super().__init__(GreetingEncodingPayloadConverter(),
                         *DefaultPayloadConverter.default_encoding_payload_converters)


def encodings(history: list[dict[str, Any]]) -> list[bytes]:
    started = history[0]["attributes"][1]
    completed = history[-1]["attributes"][1]
    return [started["input"][0]["metadata"]["encoding"], completed["result"][0]["metadata"]["encoding"]]


@pytest.mark.parametrize("make", [
    pytest.param(lambda: dataclasses.replace(default(), payload_codec=CompressionCodec()), id="payload_codec"),
    pytest.param(lambda: DataConverter(payload_converter_class=GreetingPayloadConverter),
                 id="payload_converter_class"),
])
async def test_a_converter_on_client_and_worker(env: ScenarioEnv, make: Any) -> None:
    converter: DataConverter = make()
    # Temporal: `Client.connect(target, data_converter=converter)`; here the env's connection with that converter.
    client = Client(env.client.service, namespace="default", data_converter=converter)
    at = datetime(2025, 1, 1, tzinfo=UTC)
    async with Worker(client, task_queue=env.task_queue, workflows=[GreetingWorkflow], activities=[greet]):
        handle = await client.start_workflow(GreetingWorkflow.run, Greeting("Ada", at), id=env.workflow_id("conv"),
                                             task_queue=env.task_queue)
        assert await handle.result() == Greeting("Hello, Ada", at + timedelta(days=1))
    expected = b"binary/zlib" if converter.payload_codec else b"text/my-greeting-encoding"
    assert encodings(await handle.fetch_history()) == [expected, expected]  # what history holds is encoded


def test_the_default_converter_round_trips_typed_values() -> None:
    converter = DataConverter.default
    assert default() is converter and isinstance(converter.payload_converter, DefaultPayloadConverter)
    value = Greeting("Ada", datetime(2025, 1, 1, tzinfo=UTC))
    payloads = converter.payload_converter.to_payloads([value, None, b"raw", {"n": 1}])
    assert [p.metadata["encoding"] for p in payloads] == [b"json/plain", b"binary/null", b"binary/plain",
                                                          b"json/plain"]
    assert converter.payload_converter.from_payloads(payloads, [Greeting, None, bytes, dict[str, int]]) == \
        [value, None, b"raw", {"n": 1}]


def test_an_async_codec_that_waits_is_refused_clearly() -> None:
    class Waits(CompressionCodec):
        async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
            await asyncio.sleep(0)  # gives the loop a turn: suspends
            return list(payloads)

    with pytest.raises(TypeError, match="must not suspend"):
        DataConverter(payload_codec=Waits()).encode(["x"])


def test_a_composite_converter_tries_its_converters_in_order() -> None:
    composite = GreetingPayloadConverter()
    value = Greeting("Ada", datetime(2025, 1, 1, tzinfo=UTC))
    payloads = composite.to_payloads([value, None, b"raw", [1, 2]])
    assert [p.metadata["encoding"] for p in payloads] == [b"text/my-greeting-encoding", b"binary/null",
                                                          b"binary/plain", b"json/plain"]
    assert composite.from_payloads(payloads) == [value, None, b"raw", [1, 2]]
    only_greetings = CompositePayloadConverter(GreetingEncodingPayloadConverter())
    with pytest.raises(PayloadConversionError, match="no payload converter accepts"):
        only_greetings.to_payload(42)
    with pytest.raises(PayloadConversionError, match="no payload converter for encoding"):
        only_greetings.from_payload(payloads[3])
