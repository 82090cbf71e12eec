"""Record keys escape their components, split back exactly, sort history in event order and pick the shard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ostinato.schemas.keys import (
    activity_task_key,
    history_key,
    history_key_in,
    join_key,
    run_key,
    shard_for,
    split_key,
    workflow_key,
)

VECTORS_FILE = Path(__file__).resolve().parents[2] / "schemas" / "test-vectors" / "partitioner.json"


@given(st.lists(st.text(), min_size=1))
def test_split_undoes_join(parts: list[str]) -> None:
    key = join_key(*parts)
    assert split_key(key) == parts
    assert key.count("/") == len(parts) - 1


@given(st.lists(st.text(alphabet="%/2F5a"), min_size=1))
def test_split_undoes_join_on_escape_heavy_text(parts: list[str]) -> None:
    assert split_key(join_key(*parts)) == parts


@pytest.mark.parametrize(("parts", "key"), [
    (["default", "order-1"], "default/order-1"),
    (["default", "order/2024/1"], "default/order%2F2024%2F1"),
    (["default", "100%"], "default/100%25"),
    (["default", "%2F"], "default/%252F"),
    (["default", "%/%"], "default/%25%2F%25"),
    (["café", "注文/42", "🎉"], "café/注文%2F42/🎉"),
    ([""], ""),
    (["", ""], "/"),
    (["", "wf", ""], "/wf/"),
])
def test_examples(parts: list[str], key: str) -> None:
    assert join_key(*parts) == key
    assert split_key(key) == parts


def test_a_slash_in_an_id_cannot_forge_another_key() -> None:
    assert join_key("a/b", "c") != join_key("a", "b/c")
    assert workflow_key("default", "order/1") != run_key("default", "order", "1")


def test_join_needs_a_component() -> None:
    with pytest.raises(ValueError, match="at least one component"):
        join_key()


@pytest.mark.parametrize("key", ["a%", "a%2", "default/a%2f", "a%41", "%%", "x/%20y", "%2"])
def test_malformed_escapes_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match="malformed escape"):
        split_key(key)


def test_key_shapes() -> None:
    assert workflow_key("default", "order/1") == "default/order%2F1"
    assert run_key("default", "order-1", "run-9") == "default/order-1/run-9"
    assert history_key("default", "order-1", "run-9", 7) == "default/order-1/run-9/00000000000000000007"
    assert history_key("ns", "wf", "r", 2**63 - 1) == "ns/wf/r/09223372036854775807"
    assert activity_task_key("default", "order-1", "charge/card") == "default/order-1/charge%2Fcard"
    assert split_key(history_key("a/b", "c%d", "r", 12)) == ["a/b", "c%d", "r", "00000000000000000012"]


@given(st.lists(st.integers(min_value=0, max_value=2**63 - 1), unique=True))
def test_history_keys_sort_in_event_order(event_ids: list[int]) -> None:
    keys = {history_key("default", "order/1", "run", e): e for e in event_ids}
    assert [keys[k] for k in sorted(keys)] == sorted(event_ids)
    assert [keys[k.decode()] for k in sorted(k.encode() for k in keys)] == sorted(event_ids)  # as Kafka/RocksDB


@pytest.mark.parametrize("event_id", [-1, 2**63])
def test_history_key_refuses_ids_that_break_the_width(event_id: int) -> None:
    with pytest.raises(ValueError, match="event_id"):
        history_key("default", "order-1", "run", event_id)
    with pytest.raises(ValueError, match="event_id"):
        history_key_in(run_key("default", "order-1", "run"), event_id)


@given(st.text(), st.text(), st.text(), st.integers(min_value=0, max_value=2**63 - 1))
def test_a_history_key_below_a_run_key_splits_into_its_components(ns: str, wf: str, run_id: str,
                                                                    event_id: int) -> None:
    key = history_key_in(run_key(ns, wf, run_id), event_id)
    assert split_key(key) == [ns, wf, run_id, f"{event_id:020d}"]


def test_shard_for_matches_the_java_vectors() -> None:
    vectors = json.loads(VECTORS_FILE.read_text(encoding="ascii"))
    java = {(v["key"], v["partitions"]): v["partition"] for v in vectors}
    cases = [("default", "order-1"), ("default", "order/2024/0001"), ("default", "100%"), ("default", "a/b/c")]
    checked = 0
    for namespace, workflow_id in cases:
        for partitions in (1, 2, 3, 4, 7, 8, 12, 16, 64, 100, 1000, 4096):
            expected = java.get((workflow_key(namespace, workflow_id), partitions))
            if expected is not None:
                assert shard_for(namespace, workflow_id, partitions) == expected
                checked += 1
    assert checked >= 12


def test_shard_for_needs_a_shard() -> None:
    with pytest.raises(ValueError, match="partitions must be at least 1"):
        shard_for("default", "order-1", 0)
    assert shard_for("default", "order-1", 1) == 0
