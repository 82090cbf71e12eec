"""No long-lived process may fetch a consumer group's offsets through an AdminClient: librdkafka dies of a SIGSEGV
in `rd_kafka_cgrp_op` when the answer says NOT_COORDINATOR (the group's coordinator moved), because an AdminClient
has no consumer group of its own to send looking for it (confluentinc/librdkafka#5040). The chaos suite's server
wipe lost both servers at once to it, from the backlog collector. `services/admin/lag.py:GroupPositions` reads them
through a consumer instead."""

from __future__ import annotations

import re

from tests.conftest import REPO

CALL = re.compile(r"\.list_consumer_group_offsets\(")
SOURCES = ("services", "streams", "sdk", "connectors", "kafka", "schemas", "bench", "tests/tools", "examples")


def test_no_source_fetches_group_offsets_through_an_admin_client() -> None:
    found = [f"{path.relative_to(REPO)}:{n}" for root in SOURCES for path in sorted((REPO / root).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), start=1) if CALL.search(line)]
    assert found == [], f"AdminClient.list_consumer_group_offsets can crash the process; use GroupPositions: {found}"
