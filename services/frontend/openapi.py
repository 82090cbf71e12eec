"""The OpenAPI description of the HTTP API, served at /api/v1/openapi.json; a test keeps it and the routes equal."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ostinato import __version__

JSON = "application/json"
AVRO = "application/vnd.ostinato.command+avro"


def _error_ref() -> dict[str, Any]:
    return {"description": "An error", "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(code): _error_ref() for code in codes}


def _json_body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {JSON: {"schema": schema}}}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out


_ANY_LIST = {"type": "array", "items": {}}
_MAP = {"type": "object", "additionalProperties": True}
_NS = {"name": "namespace", "in": "path", "required": True, "schema": {"type": "string"}}
_WF = {"name": "workflow_id", "in": "path", "required": True, "schema": {"type": "string"}}
_JOB = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
_RUN = {"name": "run_id", "in": "query", "required": False, "schema": {"type": "string"}}
_OK = {"200": {"description": "OK", "content": {JSON: {"schema": {"type": "object"}}}}}
_START = _obj({
    "workflow_id": {"type": "string"}, "workflow_type": {"type": "string"}, "task_queue": {"type": "string"},
    "input": _ANY_LIST, "execution_timeout_ms": {"type": "integer", "minimum": 1},
    "run_timeout_ms": {"type": "integer", "minimum": 1}, "task_timeout_ms": {"type": "integer", "minimum": 1},
    "id_reuse_policy": {"type": "string"}, "id_conflict_policy": {"type": "string"}, "memo": _MAP,
    "search_attributes": {**_MAP, "description": "name -> JSON value of custom attributes registered in the "
                          "namespace (a value of the wrong type, or an unregistered name, is a 400)"},
    "request_id": {"type": "string"},
    "cron_schedule": {"type": "string", "description": "5-field cron (UTC): a run at each of its times"},
    "wait": {"type": "boolean", "description": "false: answer 202 once Kafka has the start (bulk starts)"},
}, ["workflow_id", "workflow_type", "task_queue"])

_SA_TYPE = {"type": "string", "enum": ["Keyword", "Text", "Int", "Double", "Bool", "Datetime", "KeywordList"]}
_SEARCH_ATTRIBUTES = {"200": {"description": "The namespace's search attributes", "content": {JSON: {"schema": _obj({
    "namespace": {"type": "string"}, "custom_attributes": {"type": "object", "additionalProperties": _SA_TYPE},
    "system_attributes": {"type": "object", "additionalProperties": {"type": "string"}}},
    ["namespace", "custom_attributes", "system_attributes"])}}}}

_STAGE = {"type": "string", "enum": ["ADMITTED", "ACCEPTED", "COMPLETED"]}
_UPDATE = _obj({"input": _ANY_LIST, "update_id": {"type": "string", "description": "de-duplicates: the same id "
                                                  "joins the first update (default: a new one)"},
                "run_id": {"type": "string"}, "request_id": {"type": "string"}, "wait_stage": _STAGE,
                "timeout_ms": {"type": "integer", "minimum": 1}})
_UPDATE_NAMED = {**_UPDATE, "properties": {"name": {"type": "string"}, "input": _ANY_LIST,
                                           "update_id": {"type": "string"}}, "required": ["name"]}
_ADMITTED = _obj({"update_id": {"type": "string"}, "run_id": {"type": "string"}, "stage": _STAGE,
                  "location": {"type": "string"}})


# What a worker in any language reads first (schemas/README.md): where the topics are and how to reach them.
_CLUSTER = {"200": {"description": "OK", "content": {JSON: {"schema": _obj({
    "kafka_bootstrap": {"type": "string", "description": "bootstrap servers, host:port,..."},
    "kafka_security": {"type": "object", "additionalProperties": {"type": "string"},
                       "description": "the server's librdkafka security.protocol and sasl.mechanism (when set): "
                                      "never a credential; each worker brings its own"},
    "topic_prefix": {"type": "string"}, "shards": {"type": "integer", "minimum": 1},
    "replication_factor": {"type": "integer", "minimum": 1}, "reply_partitions": {"type": "integer", "minimum": 1},
    "server_version": {"type": "string"},
}, ["kafka_bootstrap", "kafka_security", "topic_prefix", "shards", "replication_factor", "reply_partitions",
    "server_version"])}}}}

_INT = {"type": "integer"}
_LAG_ROW = {"position": {"type": "integer", "nullable": True,
                         "description": "the next offset the reader will read; null when it never committed one"},
            "start": _INT, "end": {"type": "integer", "description": "the last stable offset (read_committed)"},
            "lag": {"type": "integer", "minimum": 0,
                    "description": "offsets between the reader and the end (transaction markers count)"}}
_BROKERS = {"200": {"description": "OK", "content": {JSON: {"schema": _obj({
    "cluster_id": {"type": "string", "nullable": True}, "bootstrap": {"type": "string"},
    "measured_at_ms": _INT,
    "brokers": {"type": "array", "items": _obj({
        "node_id": _INT, "host": {"type": "string"}, "port": _INT, "controller": {"type": "boolean"},
        "reachable": {"type": "boolean", "description": "this server opened a TCP connection to it just now"}},
        ["node_id", "host", "port", "controller", "reachable"])},
}, ["cluster_id", "bootstrap", "measured_at_ms", "brokers"])}}}}
_LAG = {"200": {"description": "OK", "content": {JSON: {"schema": _obj({
    "measured_at_ms": _INT,
    "processor": _obj({"group": {"type": "string"}, "topic": {"type": "string"}, "lag": _INT,
                       "shards": {"type": "array", "items": _obj({"shard": _INT, **_LAG_ROW},
                                                                 ["shard", "position", "start", "end", "lag"])}},
                      ["group", "topic", "lag", "shards"]),
    "visibility": {**_obj({"store": {"type": "string", "enum": ["sqlite", "opensearch"]}, "lag": _INT,
                           "partitions": {"type": "array", "items": _obj(
                               {"partition": _INT, **_LAG_ROW}, ["partition", "position", "start", "end", "lag"])}},
                          ["store", "lag", "partitions"]), "nullable": True},
}, ["measured_at_ms", "processor", "visibility"])}}}}


_TQ = {"name": "task_queue", "in": "path", "required": True, "schema": {"type": "string"}}
_RATE_LIMIT = {"200": {"description": "The limit in force", "content": {"application/json": {"schema": _obj({
    "task_queue": {"type": "string"}, "activities_per_second": {"type": ["number", "null"]}})}}}}
_SID = {"name": "schedule_id", "in": "path", "required": True, "schema": {"type": "string"}}
_OVERLAP = {"type": "string", "enum": ["UNSPECIFIED", "SKIP", "BUFFER_ONE", "BUFFER_ALL", "CANCEL_OTHER",
                                       "TERMINATE_OTHER", "ALLOW_ALL"]}
_RANGE = _obj({"start": _INT, "end": _INT, "step": _INT}, ["start"])
_CALENDAR = _obj({name: {"type": "array", "items": _RANGE} for name in (
    "second", "minute", "hour", "day_of_month", "month", "year", "day_of_week")} | {"comment": {"type": "string"}})
_BACKFILL = _obj({"start_at_ms": _INT, "end_at_ms": _INT, "overlap": _OVERLAP}, ["start_at_ms", "end_at_ms"])
_SCHEDULE = _obj({
    "spec": _obj({"calendars": {"type": "array", "items": _CALENDAR}, "skip": {"type": "array", "items": _CALENDAR},
                  "intervals": {"type": "array", "items": _obj({"every_ms": _INT, "offset_ms": _INT}, ["every_ms"])},
                  "cron_expressions": {"type": "array", "items": {"type": "string"}},
                  "start_at_ms": {**_INT, "nullable": True}, "end_at_ms": {**_INT, "nullable": True},
                  "jitter_ms": _INT, "time_zone_name": {"type": "string"}}),
    "action": _obj({"workflow_id": {"type": "string"}, "workflow_type": {"type": "string"},
                    "task_queue": {"type": "string"}, "input": _ANY_LIST, "memo": _MAP,
                    "execution_timeout_ms": _INT, "run_timeout_ms": _INT, "task_timeout_ms": _INT},
                   ["workflow_id", "workflow_type", "task_queue"]),
    "policy": _obj({"overlap": _OVERLAP, "catchup_window_ms": _INT, "pause_on_failure": {"type": "boolean"}}),
    "state": _obj({"note": {"type": "string"}, "paused": {"type": "boolean"}, "limited_actions": {"type": "boolean"},
                   "remaining_actions": _INT})}, ["action"])


def _schedule_paths() -> dict[str, Any]:
    """Schedules (issue 21): Temporal's operations on engine-kept schedules."""
    base = "/api/v1/namespaces/{namespace}/schedules"

    def op(summary: str, params: list[Any], body: dict[str, Any] | None, *codes: int) -> dict[str, Any]:
        found: dict[str, Any] = {"summary": summary, "parameters": params, "responses": {**_OK, **_errors(*codes)}}
        if body is not None:
            found["requestBody"] = _json_body(body, required=bool(body.get("required")))
        return found

    note = _obj({"note": {"type": "string"}})
    return {
        base: {"post": op("Create a schedule (409 if it exists)", [_NS], {
            **_SCHEDULE, "properties": {**_SCHEDULE["properties"], "schedule_id": {"type": "string"},
                                        "trigger_immediately": {"type": "boolean"},
                                        "backfill": {"type": "array", "items": _BACKFILL}},
            "required": ["schedule_id", "action"]}, 400, 404, 409, 413, 504),
               "get": op("The namespace's schedules (from visibility)", [_NS], None, 400, 404)},
        base + "/{schedule_id}": {
            "get": op("A schedule: its definition, counts, running, recent (10) and upcoming (10) actions",
                      [_NS, _SID], None, 404, 503),
            "put": op("Replace a schedule's definition (its progress stays)", [_NS, _SID], _SCHEDULE,
                      400, 404, 413, 504),
            "delete": op("Delete a schedule (the runs it started go on)", [_NS, _SID], None, 400, 404, 504)},
        base + "/{schedule_id}/pause": {"post": op("Pause, with a note", [_NS, _SID], note, 400, 404, 504)},
        base + "/{schedule_id}/unpause": {"post": op("Unpause, with a note", [_NS, _SID], note, 400, 404, 504)},
        base + "/{schedule_id}/trigger": {"post": op("Take an action now", [_NS, _SID], _obj({"overlap": _OVERLAP}),
                                                     400, 404, 504)},
        base + "/{schedule_id}/backfill": {"post": op("Take the actions of past ranges now", [_NS, _SID], _obj({
            "backfill": {"type": "array", "items": _BACKFILL}}, ["backfill"]), 400, 404, 504)},
    }


def spec() -> dict[str, Any]:
    base = "/api/v1/namespaces/{namespace}/workflows"
    one = base + "/{workflow_id}"

    def post(summary: str, body: dict[str, Any] | None, *codes: int, params: list[Any] | None = None,
             ok: dict[str, Any] | None = None) -> dict[str, Any]:
        op: dict[str, Any] = {"summary": summary, "parameters": params or [_NS, _WF],
                              "responses": {**(ok or _OK), **_errors(*codes)}}
        if body is not None:
            op["requestBody"] = _json_body(body, required=False) if not body.get("required") else _json_body(body)
        return {"post": op}

    def get(summary: str, params: list[Any], *codes: int, ok: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"get": {"summary": summary, "parameters": params, "responses": {**(ok or _OK), **_errors(*codes)}}}

    paths = {
        "/api/v1/cluster": get("Kafka bootstrap, topic prefix and shard count, for workers", [], ok=_CLUSTER),
        "/api/v1/cluster/owners": get("Which process owns which shard", []),
        "/api/v1/cluster/brokers": get("The brokers the cluster's metadata lists, the controller, and whether this "
                                       "server reaches each (cached for 2 s)", [], 503, ok=_BROKERS),
        "/api/v1/cluster/lag": get("Processor lag per shard (its consumer group's committed offsets on the commands "
                                   "topic against each partition's end) and the lag of this server's visibility "
                                   "store behind the visibility topic, in offsets (cached for 2 s)", [], 503,
                                   ok=_LAG),
        "/api/v1/openapi.json": get("This document", []),
        "/api/v1/namespaces/{namespace}/batch-operations": post(
            "Start a batch operation: terminate, cancel, signal or reset every run the visibility query selects, as "
            "a durable job (rps: operations per second, 0 or absent: unlimited)",
            _obj({"query": {"type": "string"}, "job_id": {"type": "string"},
                  "operation": {"type": "string", "enum": ["terminate", "cancel", "signal", "reset"]},
                  "reason": {"type": "string"}, "signal_name": {"type": "string"}, "args": _ANY_LIST,
                  "reset_type": {"type": "string", "enum": ["FIRST_WORKFLOW_TASK", "LAST_WORKFLOW_TASK"]},
                  "reapply_signals": {"type": "boolean"}, "rps": {"type": "number", "minimum": 0}},
                 ["query", "operation"]),
            400, 404, 409, 503, 504, params=[_NS],
            ok={"201": {"description": "Started", "content": {JSON: {"schema": _obj({
                "job_id": {"type": "string"}, "run_id": {"type": "string"}})}}}}),
        "/api/v1/namespaces/{namespace}/batch-operations/{job_id}": get(
            "A batch operation's progress: state (RUNNING, COMPLETED, CANCELED), total, done, failed, errors",
            [_NS, _JOB], 400, 404, 503, 504),
        "/api/v1/namespaces/{namespace}/batch-operations/{job_id}/cancel": post(
            "Cancel a batch operation (runs already acted on stay so)", None, 400, 404, 409, 503, 504,
            params=[_NS, _JOB]),
        "/api/v1/commands": {"post": {
            "summary": "SDK path: a single-object Avro Command in, the Reply the engine wrote out",
            "parameters": [{"name": "timeout_ms", "in": "query", "schema": {"type": "integer"}}],
            "requestBody": {"required": True, "content": {AVRO: {"schema": {"type": "string", "format": "binary"}}}},
            "responses": {"200": {"description": "The Reply", "content": {AVRO: {"schema": {
                "type": "string", "format": "binary"}}}}, **_errors(400, 403, 413, 415, 503, 504)}}},
        base + "#list": {},
        base: post("Start a workflow", _START, 400, 409, 413, 503, 504, params=[_NS],
                   ok={"201": {"description": "Started", "content": {JSON: {"schema": _obj({
                       "workflow_id": {"type": "string"}, "run_id": {"type": "string"},
                       "started": {"type": "boolean"}})}}}, "200": {"description": "Already running (USE_EXISTING)"}}),
        one + "/signal": post("Signal a workflow", _obj({"signal_name": {"type": "string"}, "input": _ANY_LIST,
                                                         "run_id": {"type": "string"},
                                                         "request_id": {"type": "string"}}, ["signal_name"]),
                              400, 404, 409, 413, 503, 504),
        one + "/signal-with-start": post("Signal a workflow, starting it if it is not running",
                                         {**_START, "properties": {**_START["properties"],
                                                                   "signal_name": {"type": "string"},
                                                                   "signal_input": _ANY_LIST}},
                                         400, 409, 413, 503, 504),
        one + "/query": post("Ask a running workflow (a worker answers)",
                             _obj({"query_type": {"type": "string"}, "args": _ANY_LIST,
                                   "timeout_ms": {"type": "integer", "minimum": 1}, "run_id": {"type": "string"}},
                                  ["query_type"]), 400, 404, 413, 503, 504),
        one + "/cancel": post("Ask a workflow to cancel", _obj({"reason": {"type": "string"},
                                                                "run_id": {"type": "string"}}), 400, 404, 503, 504),
        one + "/terminate": post("Terminate a workflow", _obj({"reason": {"type": "string"},
                                                               "run_id": {"type": "string"}}), 400, 404, 503, 504),
        one + "/reset": post("Reset: a new run whose history is this run's up to a completed workflow task (event_id, "
                             "or reset_type FIRST_WORKFLOW_TASK or LAST_WORKFLOW_TASK), continued by today's code; "
                             "later signals are delivered again unless reapply_signals is false; the open run is "
                             "terminated",
                             _obj({"event_id": {"type": "integer", "minimum": 1},
                                   "reset_type": {"type": "string",
                                                  "enum": ["FIRST_WORKFLOW_TASK", "LAST_WORKFLOW_TASK"]},
                                   "reason": {"type": "string"}, "reapply_signals": {"type": "boolean"},
                                   "run_id": {"type": "string"}, "request_id": {"type": "string"}}),
                             400, 404, 503, 504,
                             ok={"200": {"description": "The new run", "content": {JSON: {"schema": _obj({
                                 "run_id": {"type": "string"}})}}}}),
        one + "/redrive": post("Decide the run's quarantined commands again (after an upgrade that fixed what failed "
                               "them); one outcome per command: APPLIED, REJECTED or FAILED (stays quarantined)",
                               _obj({"reason": {"type": "string"}, "run_id": {"type": "string"},
                                     "request_id": {"type": "string"}}), 400, 404, 503, 504,
                               ok={"200": {"description": "Outcomes", "content": {JSON: {"schema": _obj({
                                   "run_id": {"type": "string"}, "outcomes": {"type": "array", "items": _obj({
                                       "request_id": {"type": "string"}, "command_type": {"type": "string"},
                                       "outcome": {"type": "string", "enum": ["APPLIED", "REJECTED", "FAILED"]},
                                       "message": {"type": "string"}})}})}}}}),
        one + "/updates/{name}": post(
            "Call an update handler (Temporal's UpdateWorkflowExecution). wait_stage ADMITTED answers 200 once the "
            "engine has it; ACCEPTED (default) or COMPLETED answer 303 See Other to GET .../updates/{update_id}, "
            "which waits for that stage (curl -L, browsers and HTTP libraries follow it)",
            _UPDATE, 400, 404, 409, 413, 429, 503, 504,
            params=[_NS, _WF, {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
            ok={"200": {"description": "Admitted (wait_stage ADMITTED)", "content": {JSON: {"schema": _ADMITTED}}},
                "303": {"description": "Admitted: the Location waits for the stage asked for",
                        "content": {JSON: {"schema": _ADMITTED}}}}),
        one + "/update-with-start": post(
            "Start the workflow unless it runs (id_conflict_policy USE_EXISTING, the default here, or FAIL) and "
            "update it, in one command; answers as /updates/{name}",
            {**_START, "properties": {**_START["properties"], "update": _UPDATE_NAMED, "wait_stage": _STAGE,
                                      "timeout_ms": {"type": "integer", "minimum": 1}},
             "required": ["workflow_type", "task_queue", "update"]},
            400, 409, 413, 429, 503, 504,
            ok={"200": {"description": "Admitted (wait_stage ADMITTED)", "content": {JSON: {"schema": _ADMITTED}}},
                "303": {"description": "Admitted: the Location waits for the stage asked for"}}),
        one + "/updates/{update_id}": get(
            "Where an update stands: long-polls (wait_ms, max 60000) until wait_stage or until it cannot get there "
            "(run_closed). A rejected update is COMPLETED with rejected and its failure. 404: never sent, or "
            "forgotten before it was accepted (send it again with the same id)",
            [_NS, _WF, _RUN, {"name": "update_id", "in": "path", "required": True, "schema": {"type": "string"}},
             {"name": "wait_stage", "in": "query", "schema": _STAGE},
             {"name": "wait_ms", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": 60000}}],
            400, 404, 503, ok={"200": {"description": "The update's stage and outcome", "content": {JSON: {
                "schema": _obj({"update_id": {"type": "string"}, "run_id": {"type": "string"}, "stage": _STAGE,
                                "outcome": {"type": "object", "nullable": True,
                                            "description": "{result, payloads} or {failure}"},
                                "rejected": {"type": "boolean"}, "run_closed": {"type": "boolean"}})}}}}),
        one + "/result": get("Wait for the run to close (long poll, follows continue-as-new)",
                             [_NS, _WF, _RUN, {"name": "timeout_ms", "in": "query", "schema": {"type": "integer"}},
                              {"name": "follow", "in": "query", "schema": {"type": "boolean"}}], 400, 404, 503, 504),
        one: get("Describe a run (its mutable state; `quarantine` lists commands the engine failed to process for "
                 "it, see /redrive)", [_NS, _WF, _RUN], 404, 503),
        one + "/history": get("A page of a run's history", [
            _NS, _WF, _RUN, {"name": "page_size", "in": "query", "schema": {"type": "integer"}},
            {"name": "next_page_token", "in": "query", "schema": {"type": "string"}},
            {"name": "wait_ms", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": 60000},
             "description": "Long-poll: when the page would be empty and the run is open, wait this long for "
                            "new events"},
            {"name": "filter", "in": "query", "schema": {"type": "string", "enum": ["all", "close", "children"]},
             "description": "close: only the run's closing event (none while it is open), and wait_ms waits for "
                            "the close rather than for any new event (Temporal's CLOSE_EVENT filter); children: "
                            "only the child workflow events (initiated, start failed, started, and each child's "
                            "outcome), page_size of them per page"}],
            400, 404, 503),
        one + "/pending": get("What a run waits for", [_NS, _WF, _RUN], 404, 503),
        one + "/archived-history": get("A run's whole history from its S3 archive (the latest closed run unless "
                                       "run_id is given); 404 when not archived or archival is not configured",
                                       [_NS, _WF, _RUN], 404, 502),
        "/metrics": get("Prometheus metrics", []),
        "/api/v1/namespaces": {**get("Every namespace (default included)", []),
                               **post("Register a namespace", _obj({
                                   "name": {"type": "string"}, "retention_days": {"type": "number"},
                                   "retention_ms": {"type": "integer"}, "description": {"type": "string"},
                                   "owner_email": {"type": "string"}}, ["name"]), 400, 409, 503, params=[],
                                   ok={"201": {"description": "Registered"}})},
        "/api/v1/namespaces/{namespace}": get("A namespace and its retention", [_NS], 404),
        "/api/v1/namespaces/{namespace}/search-attributes": {
            **get("The namespace's custom search attributes and the built-in ones, name to type", [_NS], 404,
                  ok=_SEARCH_ATTRIBUTES),
            **post("Register custom search attributes (Temporal's `operator search-attribute create`); the same "
                   "name and type again is a no-op, another type a 409", _obj({
                       "search_attributes": {"type": "object", "additionalProperties": _SA_TYPE}},
                       ["search_attributes"]), 400, 404, 409, 503, params=[_NS], ok=_SEARCH_ATTRIBUTES)},
        "/api/v1/namespaces/{namespace}/workflow-count": get("How many runs match a query", [
            _NS, {"name": "query", "in": "query", "schema": {"type": "string"}}], 400),
        "/api/v1/namespaces/{namespace}/task-queues/{task_queue}/versioning": {
            **get("Worker versioning: the queue's current and ramping build (where new and auto-upgrade workflow tasks "
                  "go)", [_NS, {"name": "task_queue", "in": "path", "required": True, "schema": {"type": "string"}}],
                  404),
            **post("Change the queue's current build (`current_build`) or ramping build (`ramping_build`, "
                   "`ramping_percentage` 0-100; an empty build ends the ramp); fields left out keep their value",
                   _obj({"current_build": {"type": "string"}, "ramping_build": {"type": "string"},
                         "ramping_percentage": {"type": "number"}}, []), 400, 404, 503,
                   params=[_NS, {"name": "task_queue", "in": "path", "required": True,
                                 "schema": {"type": "string"}}])},
        "/api/v1/namespaces/{namespace}/task-queues/{task_queue}": get(
            "A task queue's backlog, oldest waiting task and workers",
            [_NS, {"name": "task_queue", "in": "path", "required": True, "schema": {"type": "string"}}], 400, 503),
        "/api/v1/namespaces/{namespace}/task-queues/{task_queue}/rate-limit": {
            **get("The task queue's engine-enforced activity rate (null: none)", [_NS, _TQ], ok=_RATE_LIMIT),
            "put": {"summary": "Set the task queue's activity rate across all its workers, enforced by the engine "
                               "(temporalio's max_task_queue_activities_per_second); 0 or null lifts it",
                    "parameters": [_NS, _TQ], "requestBody": _json_body(_obj({
                        "activities_per_second": {"type": ["number", "null"], "minimum": 0},
                        "set_by": {"type": "string"}}, ["activities_per_second"])),
                    "responses": {**_RATE_LIMIT, **_errors(400, 503)}}},
    }
    paths.update(_schedule_paths())
    paths.pop(base + "#list")
    paths[base]["get"] = get("List runs matching a query (WorkflowType = 'x' AND ExecutionStatus = 'Running' "
                             "ORDER BY StartTime DESC)", [
        _NS, {"name": "query", "in": "query", "schema": {"type": "string"}},
        {"name": "page_size", "in": "query", "schema": {"type": "integer"}},
        {"name": "next_page_token", "in": "query", "schema": {"type": "string"}}], 400)["get"]
    return {
        "openapi": "3.0.3",
        "info": {"title": "Ostinato", "version": __version__,
                 "description": "Durable workflows on Apache Kafka. Errors are {code, message, details}."},
        "paths": paths,
        "components": {"schemas": {"Error": _obj({"code": {"type": "string"}, "message": {"type": "string"},
                                                  "details": {"type": "object"}}, ["code", "message", "details"])}},
    }


async def get_openapi(request: web.Request) -> web.Response:
    return web.json_response(spec())


def install(app: web.Application) -> None:
    app.router.add_get("/api/v1/openapi.json", get_openapi)
