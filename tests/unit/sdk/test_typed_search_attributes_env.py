"""Typed search attributes on the time-skipping environment: registered keys, typed start and upsert, what
`workflow.info()` and `describe()` show, and what the engine refuses."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from ostinato import workflow
from ostinato.client import WorkflowHandle
from ostinato.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from ostinato.exceptions import RPCError
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Worker
from tests.unit.sdk.support import run_async

Q = "typed-sa"
CUSTOMER = SearchAttributeKey.for_keyword("CustomerId")
COUNT = SearchAttributeKey.for_int("Count")
DUE = SearchAttributeKey.for_datetime("Due")
TAGS = SearchAttributeKey.for_keyword_list("Tags")
VIP = SearchAttributeKey.for_bool("Vip")
KEYS = [CUSTOMER, COUNT, DUE, TAGS, VIP]
DUE_AT = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)


@workflow.defn
class Tagged:
    def __init__(self) -> None:
        self.done = False

    @workflow.run
    async def run(self) -> dict[str, str]:
        seen = {p.key.name: repr(p.value) for p in workflow.info().typed_search_attributes}
        workflow.upsert_search_attributes([COUNT.value_set(5), DUE.value_set(DUE_AT), TAGS.value_set(["a", "b"]),
                                           VIP.value_unset()])
        after = workflow.info().typed_search_attributes
        assert after.get(COUNT) == 5 and VIP not in after and after[CUSTOMER] == "c-1"
        assert workflow.info().search_attributes["Tags"] == ["a", "b"]  # temporalio's deprecated view
        assert workflow.info().search_attributes["Count"] == [5]
        await workflow.wait_condition(lambda: self.done)
        return seen

    @workflow.signal
    def finish(self) -> None:
        self.done = True


@workflow.defn
class Unregistered:
    @workflow.run
    async def run(self) -> None:
        workflow.upsert_search_attributes([SearchAttributeKey.for_keyword("Region").value_set("eu")])
        await workflow.wait_condition(lambda: False)


@workflow.defn
class Child:
    @workflow.run
    async def run(self) -> str:
        return workflow.info().typed_search_attributes[CUSTOMER]


@workflow.defn
class Parent:
    @workflow.run
    async def run(self, round_: int) -> str:
        if round_ == 0:
            workflow.continue_as_new(1, search_attributes=TypedSearchAttributes([SearchAttributePair(COUNT, 42)]))
        assert workflow.info().typed_search_attributes == TypedSearchAttributes([SearchAttributePair(COUNT, 42)])
        return await workflow.execute_child_workflow(Child.run, id="typed-child", search_attributes=(
            TypedSearchAttributes([SearchAttributePair(CUSTOMER, "from-parent")])))


async def _described(handle: WorkflowHandle, until: object) -> TypedSearchAttributes:
    for _ in range(500):
        found = (await handle.describe()).typed_search_attributes
        if until in found:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError(f"describe never showed {until}")


@run_async
async def test_typed_start_and_upsert_show_in_info_and_describe_with_their_types() -> None:
    async with await WorkflowEnvironment.start_time_skipping(search_attributes=KEYS) as env, \
            Worker(env.client, task_queue=Q, workflows=[Tagged]):
        assert [k.name for k in await env.client.list_search_attributes()] == sorted(k.name for k in KEYS)
        handle = await env.client.start_workflow(Tagged.run, id="tagged", task_queue=Q,
                                                 search_attributes=TypedSearchAttributes([
                                                     SearchAttributePair(CUSTOMER, "c-1"),
                                                     SearchAttributePair(VIP, True)]))
        found = await _described(handle, DUE)
        assert found == TypedSearchAttributes([
            SearchAttributePair(CUSTOMER, "c-1"), SearchAttributePair(COUNT, 5), SearchAttributePair(DUE, DUE_AT),
            SearchAttributePair(TAGS, ["a", "b"])])
        assert found[DUE] == DUE_AT and isinstance(found[COUNT], int)
        await handle.signal(Tagged.finish)
        assert await handle.result() == {"CustomerId": "'c-1'", "Vip": "True"}


@run_async
async def test_children_and_continue_as_new_take_typed_attributes() -> None:
    async with await WorkflowEnvironment.start_time_skipping(search_attributes=KEYS) as env, \
            Worker(env.client, task_queue=Q, workflows=[Parent, Child]):
        handle = await env.client.start_workflow(Parent.run, 0, id="parent", task_queue=Q, search_attributes=(
            TypedSearchAttributes([SearchAttributePair(VIP, True)])))
        assert await handle.result() == "from-parent"
        assert (await env.client.get_workflow_handle("parent").describe()).typed_search_attributes == \
            TypedSearchAttributes([SearchAttributePair(COUNT, 42)])
        assert (await env.client.get_workflow_handle("typed-child").describe()).typed_search_attributes == \
            TypedSearchAttributes([SearchAttributePair(CUSTOMER, "from-parent")])


@run_async
async def test_a_start_with_a_wrong_type_or_an_unregistered_attribute_is_refused() -> None:
    async with await WorkflowEnvironment.start_time_skipping(search_attributes=KEYS) as env:
        with pytest.raises(RPCError, match="'Count' is Int: expected a 64-bit integer") as refused, \
                pytest.warns(DeprecationWarning):  # the dictionary form, typed by the engine from the registry
            await env.client.start_workflow("Tagged", id="bad-1", task_queue=Q, search_attributes={"Count": "five"})
        assert refused.value.code == "INVALID_ARGUMENT"
        with pytest.raises(RPCError, match="'Region' is not registered"):
            await env.client.start_workflow("Tagged", id="bad-2", task_queue=Q, search_attributes=TypedSearchAttributes(
                [SearchAttributePair(SearchAttributeKey.for_keyword("Region"), "eu")]))
        with pytest.raises(TypeError, match="'Count' is Int"):  # the typed form is checked before it leaves
            await env.client.start_workflow("Tagged", id="bad-3", task_queue=Q, search_attributes=TypedSearchAttributes(
                [SearchAttributePair(COUNT, "five")]))


@run_async
async def test_an_upsert_of_an_unregistered_attribute_fails_the_workflow_task() -> None:
    async with await WorkflowEnvironment.start_time_skipping(search_attributes=KEYS) as env, \
            Worker(env.client, task_queue=Q, workflows=[Unregistered]):
        handle = await env.client.start_workflow(Unregistered.run, id="unregistered", task_queue=Q)
        for _ in range(500):
            failure = (await handle.describe()).last_workflow_task_failure
            if failure is not None:
                break
            await asyncio.sleep(0.01)
        assert failure is not None
        assert failure["cause"] == "BAD_COMMAND" and "'Region' is not registered" in failure["message"]
        description = await handle.describe()
        assert description.status is not None and description.status.name == "RUNNING"
        assert description.typed_search_attributes == TypedSearchAttributes.empty
        # Registering it is the fix: the task's next attempt goes through, without touching the run.
        region = SearchAttributeKey.for_keyword("Region")
        await env.client.add_search_attributes([region])
        for _ in range(50):
            await env.sleep(timedelta(minutes=1))  # past the failed task's retry backoff
            if region in (await handle.describe()).typed_search_attributes:
                break
        assert (await handle.describe()).typed_search_attributes[region] == "eu"
        await handle.terminate("done")


@run_async
async def test_registering_again_with_another_type_is_refused() -> None:
    async with await WorkflowEnvironment.start_time_skipping(search_attributes=KEYS) as env:
        await env.client.add_search_attributes([COUNT])  # the same type: a no-op
        with pytest.raises(RPCError, match="already registered as Int"):
            await env.client.add_search_attributes([SearchAttributeKey.for_text("Count")])
