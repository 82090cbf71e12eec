"""The data converter: values to `ostinato.Payload` records and back (payload converter, then codecs, then the
blob store for large ones), and exceptions to `ostinato.Failure` records and back."""

from __future__ import annotations

import contextlib
import inspect
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from ostinato.schemas.payloads import Payload, PayloadLimits
from ostinato.sdk import exceptions as exc
from ostinato.sdk._context import outside_workflow
from ostinato.sdk.blobstore import DEFAULT_LIMITS, BlobStore, offload_all, resolve_all
from ostinato.sdk.codecs import PayloadCodec
from ostinato.sdk.converter import DefaultPayloadConverter, PayloadConverter

Record = dict[str, Any]
SOURCE = "ostinato-python"
MAX_CAUSE_DEPTH = 20


def to_record(payload: Payload) -> Record:
    return {"metadata": dict(payload.metadata), "data": payload.data}


def from_record(record: Record) -> Payload:
    return Payload(dict(record["metadata"]), record["data"])


def _settled(result: Any, codec: PayloadCodec) -> list[Payload]:
    """A codec's answer; an `async def` codec's coroutine is run to its end here, which works while it awaits
    nothing that suspends (encryption and compression do not)."""
    if not inspect.iscoroutine(result):
        return list(result)
    try:
        result.send(None)
    except StopIteration as done:
        return list(done.value)
    result.close()
    raise TypeError(f"payload codec {type(codec).__name__} waited on something: an async codec must not suspend, "
                    "since payloads are converted inside workflow code")


def _unguarded() -> contextlib.AbstractContextManager[None]:
    """The blob store's network I/O may run on a workflow's thread (a large input decoded at activation)."""
    return outside_workflow()


@dataclass(eq=False)  # a dataclass so Temporal's `dataclasses.replace(converter.default(), payload_codec=...)` works
class DataConverter:
    """How user values travel. The same converter (and codecs) must be used by every client and worker of a
    namespace; a worker never needs the keys of codecs it does not decode.

    Temporal's keywords work too: `payload_codec` (one codec, applied after `codecs`) and `payload_converter_class`
    (a class made with no arguments; it wins over `payload_converter`). A codec's `encode` / `decode` may be
    `async def`, as Temporal's are, provided they do not wait on anything (the converter runs inside workflow code,
    which cannot wait on I/O)."""

    payload_converter: PayloadConverter = None  # type: ignore[assignment] # None: DefaultPayloadConverter()
    codecs: Sequence[PayloadCodec] = ()
    blob_store: BlobStore | None = None
    limits: PayloadLimits = DEFAULT_LIMITS
    payload_codec: PayloadCodec | None = None
    payload_converter_class: type[PayloadConverter] | None = None
    default: ClassVar[DataConverter]  # Temporal's `DataConverter.default`, set below

    def __post_init__(self) -> None:
        if self.payload_converter_class is not None:
            self.payload_converter = self.payload_converter_class()
        elif self.payload_converter is None:
            self.payload_converter = DefaultPayloadConverter()
        self.codecs = tuple(self.codecs)

    def _codecs(self) -> tuple[PayloadCodec, ...]:
        return (*self.codecs, self.payload_codec) if self.payload_codec is not None else tuple(self.codecs)

    def encode(self, values: Sequence[Any]) -> list[Record]:
        payloads = self.payload_converter.to_payloads(values)
        for codec in self._codecs():
            payloads = _settled(codec.encode(payloads), codec)
        if self.blob_store is not None:
            with _unguarded():
                payloads = offload_all(payloads, self.blob_store, self.limits)
        else:
            for payload in payloads:
                self.limits.check(payload)
        return [to_record(p) for p in payloads]

    def decode(self, records: Sequence[Record], hints: Sequence[Any] | None = None) -> list[Any]:
        payloads = [from_record(r) for r in records]
        if self.blob_store is not None:
            with _unguarded():
                payloads = resolve_all(payloads, self.blob_store)
        for codec in reversed(self._codecs()):
            payloads = _settled(codec.decode(payloads), codec)
        return self.payload_converter.from_payloads(payloads, hints)

    def decode_one(self, records: Sequence[Record], hint: Any = None) -> Any:
        """The first value of `records` (None when there is none): results and single arguments."""
        if not records:
            return None
        return self.decode(records[:1], [hint])[0]

    # -- failures -------------------------------------------------------------------------------------------------

    def encode_failure(self, error: BaseException, depth: int = 0) -> Record:
        record: Record = {
            "message": str(getattr(error, "message", None) or error), "kind": "APPLICATION",
            "type": type(error).__name__, "source": SOURCE,
            "stack_trace": "".join(traceback.format_tb(error.__traceback__)) if error.__traceback__ else "",
            "non_retryable": False, "details": [], "next_retry_delay_ms": None, "timeout_type": None,
            "last_heartbeat_details": [], "encoded_attributes": None, "activity_failure_info": None,
            "child_workflow_failure_info": None, "cause": None,
        }
        if isinstance(error, exc.ApplicationError):
            record.update(type=error.type or type(error).__name__, non_retryable=error.non_retryable,
                          details=self.encode(error.details),
                          next_retry_delay_ms=None if error.next_retry_delay is None
                          else int(error.next_retry_delay.total_seconds() * 1000))
        elif isinstance(error, exc.CancelledError):
            record.update(kind="CANCELED", details=self.encode(error.details))
        elif isinstance(error, exc.TimeoutError):
            record.update(kind="TIMEOUT", timeout_type=error.type,
                          last_heartbeat_details=self.encode(error.last_heartbeat_details))
        elif isinstance(error, exc.TerminatedError):
            record.update(kind="TERMINATED")
        elif isinstance(error, exc.ServerError):
            record.update(kind="SERVER")
        elif isinstance(error, exc.ActivityError):
            record.update(kind="ACTIVITY", activity_failure_info={
                "scheduled_event_id": error.scheduled_event_id, "started_event_id": 0,
                "activity_id": error.activity_id, "activity_type": error.activity_type, "identity": "",
                "retry_state": error.retry_state or "UNSPECIFIED"})
        elif isinstance(error, exc.ChildWorkflowError):
            record.update(kind="CHILD_WORKFLOW", child_workflow_failure_info={
                "namespace": "", "execution": {"workflow_id": error.workflow_id, "run_id": error.run_id},
                "workflow_type": error.workflow_type, "initiated_event_id": 0, "started_event_id": 0,
                "retry_state": error.retry_state or "UNSPECIFIED"})
        elif isinstance(error, exc.NondeterminismError):
            record.update(kind="NONDETERMINISM")
        cause = error.__cause__
        if cause is not None and depth < MAX_CAUSE_DEPTH:
            record["cause"] = self.encode_failure(cause, depth + 1)
        return record

    def decode_failure(self, record: Record) -> exc.FailureError:
        cause = self.decode_failure(record["cause"]) if record.get("cause") else None
        kind, message = record.get("kind") or "APPLICATION", record.get("message", "")
        error: exc.FailureError
        if kind == "CANCELED":
            error = exc.CancelledError(message, *self._details(record["details"]))
        elif kind == "TIMEOUT":
            error = exc.TimeoutError(message, type=record.get("timeout_type") or "UNSPECIFIED",
                                     last_heartbeat_details=self._details(record["last_heartbeat_details"]))
        elif kind == "TERMINATED":
            error = exc.TerminatedError(message)
        elif kind == "SERVER":
            error = exc.ServerError(message)
        elif kind == "ACTIVITY" and record.get("activity_failure_info"):
            info = record["activity_failure_info"]
            error = exc.ActivityError(message or "activity failed", activity_id=info["activity_id"],
                                      activity_type=info["activity_type"],
                                      scheduled_event_id=info["scheduled_event_id"], retry_state=info["retry_state"])
        elif kind == "CHILD_WORKFLOW" and record.get("child_workflow_failure_info"):
            info = record["child_workflow_failure_info"]
            error = exc.ChildWorkflowError(message or "child workflow failed",
                                           workflow_id=info["execution"]["workflow_id"],
                                           run_id=info["execution"]["run_id"], workflow_type=info["workflow_type"],
                                           retry_state=info["retry_state"])
        else:
            delay = record.get("next_retry_delay_ms")
            error = exc.ApplicationError(message, *self._details(record["details"]), type=record.get("type") or None,
                                         non_retryable=bool(record.get("non_retryable")),
                                         next_retry_delay=None if delay is None else timedelta(milliseconds=delay))
        if cause is not None:
            error.__cause__ = cause
        return error

    def _details(self, records: Sequence[Record]) -> list[Any]:
        try:
            return self.decode(records)
        except Exception:  # noqa: BLE001 - details are informational: an undecodable one must not hide the failure
            return []


DEFAULT = DataConverter()
DataConverter.default = DEFAULT
