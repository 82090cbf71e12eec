"""Appliers of what a workflow records about itself: markers (patches), search attributes and memo."""

from __future__ import annotations

from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.appliers import applier
from ostinato.streams.model import Workflow

Record = dict[str, Any]

PATCH_MARKER_PREFIX = "patch:"
_NULL = b"binary/null"


def _upsert(target: dict[str, Record], changes: dict[str, Record]) -> None:
    """A `binary/null` payload removes the key, anything else sets it (Temporal's rule)."""
    for key, payload in changes.items():
        if payload["metadata"].get("encoding") == _NULL:
            target.pop(key, None)
        else:
            target[key] = payload


@applier(ev.MARKER_RECORDED)
def marker_recorded(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    name = attrs["marker_name"]
    patches = wf.runs[run_id].patches
    if name.startswith(PATCH_MARKER_PREFIX) and name[len(PATCH_MARKER_PREFIX):] not in patches:
        patches.append(name[len(PATCH_MARKER_PREFIX):])


@applier(ev.UPSERT_WORKFLOW_SEARCH_ATTRIBUTES)
def search_attributes_upserted(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _upsert(wf.runs[run_id].search_attributes, attrs["search_attributes"])


@applier(ev.RECORD_PUBLISHED)
def record_published(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    """Nothing to keep: the record went to its topic with this event, and replay never produces it again."""


@applier(ev.WORKFLOW_PROPERTIES_MODIFIED)
def properties_modified(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _upsert(wf.runs[run_id].memo, attrs["upserted_memo"])
