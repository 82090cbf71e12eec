"""Limits and defaults of the core, all configurable per cluster."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ostinato.streams.versioning import QueueVersioning

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class Limits:
    history_warn_events: int = 10_000  # the workflow task suggests continue-as-new from here
    history_max_events: int = 50_000  # the run is terminated, with a reason saying so
    max_pending_activities: int = 2_000
    max_pending_children: int = 2_000
    max_pending_external_requests: int = 2_000
    max_signals: int = 2_000  # per run; continue-as-new starts a fresh count
    max_updates_in_flight: int = 10  # admitted or accepted and not completed, per run (Temporal's default)
    max_updates: int = 2_000  # accepted per run; continue-as-new starts a fresh count


@dataclass(frozen=True, slots=True)
class Config:
    limits: Limits = Limits()
    retention_ms: int = 7 * DAY_MS  # closed runs are deleted this long after closing (once archived, if archiving)
    archive: bool = False
    default_task_timeout_ms: int = 10_000
    max_task_timeout_ms: int = 120_000
    workflow_task_retry_initial_ms: int = 1_000  # backoff of the third and later attempts of a failing task
    workflow_task_retry_max_ms: int = 600_000
    # Topics a workflow may publish to (workflow.publish), as fnmatch patterns; none by default. The engine's own
    # topics are never allowed (`egress_problem`).
    egress_topics: tuple[str, ...] = ()
    # The namespace's registered custom search attributes, name -> type (`search_attributes.TYPES`): a cluster always
    # passes one and refuses anything else; None checks nothing (the core alone, the default test environment).
    search_attributes: Mapping[str, str] | None = None
    # Task queues with an engine-enforced activity rate (`ostinato task-queue set-rate-limit`): their activity tasks
    # go through the servers' rate limiter, so a worker cannot take one sooner by asking for it eagerly.
    rate_limited_queues: frozenset[str] = frozenset()
    # Worker versioning: each task queue's current (and ramping) build, as set through the deployments API; read at
    # dispatch (streams/versioning.py). None or a queue absent: its tasks go to its unversioned topics.
    deployments: Mapping[str, QueueVersioning] | None = None
