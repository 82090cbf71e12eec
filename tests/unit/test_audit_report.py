"""The audit example's aggregation (examples/audit/report.py), without Kafka: hand-written events in, counts out."""

from __future__ import annotations

from typing import Any

from examples.audit.report import UNKNOWN_TYPE, AuditConfig, Auditor

Record = dict[str, Any]
ATTRS = "ostinato.history."


def _event(event_id: int, kind: str, time_ms: int, attrs_type: str, **attrs: Any) -> Record:
    return {"event_id": event_id, "event_time_ms": time_ms, "event_type": kind, "applier_version": 1,
            "attributes": (ATTRS + attrs_type, attrs)}


def _started(workflow_type: str, time_ms: int = 0) -> Record:
    return _event(1, "WORKFLOW_EXECUTION_STARTED", time_ms, "WorkflowExecutionStartedEventAttributes",
                  workflow_type=workflow_type, task_queue="q")


def _scheduled(event_id: int, activity_type: str, time_ms: int) -> Record:
    return _event(event_id, "ACTIVITY_TASK_SCHEDULED", time_ms, "ActivityTaskScheduledEventAttributes",
                  activity_id=str(event_id), activity_type=activity_type, task_queue="q")


def _closed(event_id: int, kind: str, scheduled: int, time_ms: int) -> Record:
    name = "".join(w.capitalize() for w in kind.split("_")) + "EventAttributes"
    return _event(event_id, kind, time_ms, name, scheduled_event_id=scheduled, started_event_id=event_id - 1)


def _end(event_id: int, kind: str) -> Record:
    return _event(event_id, kind, 0, "WorkflowExecutionCompletedEventAttributes")


def test_a_run_is_counted_under_the_type_its_start_event_names() -> None:
    auditor = Auditor()
    auditor.observe("ns/a/r1", _started("Order"))
    auditor.observe("ns/b/r1", _started("Order"))
    auditor.observe("ns/c/r1", _started("Refund"))
    auditor.observe("ns/a/r1", _end(2, "WORKFLOW_EXECUTION_COMPLETED"))
    auditor.observe("ns/c/r1", _end(2, "WORKFLOW_EXECUTION_TERMINATED"))
    types = auditor.report()["workflow_types"]
    assert list(types) == ["Order", "Refund"]
    assert (types["Order"]["started"], types["Order"]["completed"], types["Order"]["still_open"]) == (2, 1, 1)
    assert (types["Refund"]["terminated"], types["Refund"]["still_open"]) == (1, 0)
    assert auditor.report()["events"] == 5


def test_every_way_a_run_closes_is_its_own_count() -> None:
    auditor = Auditor()
    kinds = ["COMPLETED", "FAILED", "TIMED_OUT", "CANCELED", "TERMINATED", "CONTINUED_AS_NEW"]
    for i, kind in enumerate(kinds):
        auditor.observe(f"ns/w{i}/r", _started("T"))
        auditor.observe(f"ns/w{i}/r", _end(2, f"WORKFLOW_EXECUTION_{kind}"))
    counts = auditor.report()["workflow_types"]["T"]
    assert [counts[k.lower()] for k in kinds] == [1] * 6
    assert (counts["started"], counts["still_open"]) == (6, 0)


def test_activity_outcomes_compensations_and_sla() -> None:
    auditor = Auditor(AuditConfig(sla_ms=1_000, compensation_prefixes=("compensate", "undo")))
    run = "ns/saga/r"
    auditor.observe(run, _started("Saga"))
    auditor.observe(run, _scheduled(5, "charge", 0))
    auditor.observe(run, _closed(7, "ACTIVITY_TASK_COMPLETED", 5, 1_000))  # exactly the SLA: within it
    auditor.observe(run, _scheduled(8, "ship", 2_000))
    auditor.observe(run, _closed(10, "ACTIVITY_TASK_FAILED", 8, 3_001))  # slow and failed
    auditor.observe(run, _scheduled(11, "Undo_Reserve", 4_000))  # prefixes match whatever the case
    auditor.observe(run, _scheduled(12, "compensate_charge", 4_000))
    auditor.observe(run, _closed(14, "ACTIVITY_TASK_TIMED_OUT", 11, 9_000))
    auditor.observe(run, _closed(16, "ACTIVITY_TASK_CANCELED", 12, 9_000))  # canceled: no SLA breach
    counts = auditor.report()["workflow_types"]["Saga"]
    assert counts["activities_run"] == 4
    assert (counts["activities_failed"], counts["activities_timed_out"], counts["activities_canceled"]) == (1, 1, 1)
    assert counts["compensations_run"] == 2
    assert counts["activities_over_sla"] == 2  # ship (1001 ms) and undo_reserve (5000 ms)


def test_events_of_a_run_whose_start_was_never_seen_are_kept_apart() -> None:
    auditor = Auditor()
    auditor.observe("ns/old/r", _scheduled(3, "charge", 0))
    auditor.observe("ns/old/r", _end(4, "WORKFLOW_EXECUTION_COMPLETED"))
    counts = auditor.report()["workflow_types"][UNKNOWN_TYPE]
    assert (counts["started"], counts["completed"], counts["activities_run"]) == (0, 1, 1)
    assert counts["still_open"] == -1  # says plainly that the report began mid-history


def test_closed_runs_are_forgotten_so_memory_follows_open_work() -> None:
    auditor = Auditor()
    for i in range(100):
        auditor.observe(f"ns/w{i}/r", _started("T"))
        auditor.observe(f"ns/w{i}/r", _scheduled(2, "a", 0))
        auditor.observe(f"ns/w{i}/r", _closed(4, "ACTIVITY_TASK_COMPLETED", 2, 10))
        auditor.observe(f"ns/w{i}/r", _end(5, "WORKFLOW_EXECUTION_COMPLETED"))
    assert auditor._runs == {}


def test_the_report_names_its_settings_and_is_stable() -> None:
    config = AuditConfig(sla_ms=250, compensation_prefixes=("rollback",))
    first, second = Auditor(config), Auditor(config)
    for auditor, order in ((first, ["B", "A"]), (second, ["A", "B"])):
        for name in order:
            auditor.observe(f"ns/{name}/r", _started(name))
    assert first.report() == second.report()
    assert list(first.report()["workflow_types"]) == ["A", "B"]
    assert first.report()["sla_ms"] == 250
    assert first.report()["compensation_prefixes"] == ["rollback"]
    assert first.report()["sla_measure"] == "schedule_to_close"


def test_settings_come_from_the_environment_and_flags_override_them() -> None:
    from examples.audit.app import Settings

    env = {"OSTINATO_KAFKA": "k1:9092,k2:9092", "OSTINATO_TOPIC_PREFIX": "prod", "OSTINATO_AUDIT_OUTPUT": "/tmp/a.json",
           "OSTINATO_AUDIT_SLA_MS": "900", "OSTINATO_AUDIT_COMPENSATION_PREFIXES": "undo, revert"}
    settings = Settings.parse([], env)
    assert (settings.bootstrap, settings.prefix, str(settings.output), settings.once) == (
        "k1:9092,k2:9092", "prod", "/tmp/a.json", False)
    assert settings.audit == AuditConfig(900, ("undo", "revert"))
    overridden = Settings.parse(["--once", "--sla-ms", "10", "--prefix", "dev"], env)
    assert (overridden.once, overridden.audit.sla_ms, overridden.prefix) == (True, 10, "dev")
