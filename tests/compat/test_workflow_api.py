"""Temporal's workflow API (temporalio.workflow) as Temporal's samples use it, on both engines.

The imports are the only change from Temporal code: `temporalio` -> `ostinato`. Each workflow reads like one of
Temporal's samples (hello activity, message passing, child workflows, local activities...) and reports what it saw,
so the test checks the names' behaviour, not only that they import.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from ostinato import activity, workflow
from ostinato.client import WorkflowUpdateFailedError
from ostinato.common import RetryPolicy, SearchAttributeKey
from ostinato.exceptions import ApplicationError, CancelledError, ChildWorkflowError
from tests.e2e.sdk_scenarios.envs import ScenarioEnv

with workflow.unsafe.imports_passed_through():  # how Temporal's samples import what activities need
    import json

PRIORITY = SearchAttributeKey.for_int("CompatPriority")
TEN_SECONDS = timedelta(seconds=10)


# -- a greeting with messages, activities of three kinds, and handlers set while running ----------------------------

@dataclass
class ComposeGreetingInput:
    greeting: str
    name: str


@activity.defn
async def compose_greeting(input: ComposeGreetingInput) -> str:
    activity.logger.info("Running activity with parameter %s", input)
    return f"{input.greeting}, {input.name}!"


class Punctuation:
    """Activities as methods of an object holding their dependencies (`execute_activity_method`)."""

    def __init__(self, mark: str) -> None:
        self.mark = mark

    @activity.defn
    async def emphasise(self, text: str) -> str:
        return text.rstrip("!") + self.mark


@activity.defn
def count_letters(text: str) -> int:  # a plain function: it runs on the worker's thread pool
    return sum(ch.isalpha() for ch in text)


@workflow.defn
class GreetingWorkflow:
    @workflow.init
    def __init__(self, name: str) -> None:
        self.name = name  # set before any handler runs: signals may come with the first task
        self.language = "en"
        self.done = False
        self.nicknames: list[str] = []

    @workflow.run
    async def run(self, name: str) -> dict[str, object]:
        workflow.logger.info("Running workflow with parameter %s", name)
        workflow.set_signal_handler("nickname", self.nicknames.append)
        workflow.set_query_handler("nicknames", lambda: list(self.nicknames))
        greeting = await workflow.execute_activity(
            compose_greeting, ComposeGreetingInput("Hello", name), start_to_close_timeout=TEN_SECONDS)
        loud = await workflow.execute_activity_method(Punctuation.emphasise, greeting,
                                                      start_to_close_timeout=TEN_SECONDS)
        local = await workflow.execute_local_activity(compose_greeting, ComposeGreetingInput("Hi", name),
                                                      start_to_close_timeout=TEN_SECONDS)
        await workflow.wait_condition(lambda: self.done)

        # Several activities at once: workflow.wait (asyncio.wait's shape) and workflow.as_completed.
        tasks = [workflow.start_activity(count_letters, text, start_to_close_timeout=TEN_SECONDS)
                 for text in (greeting, local)]
        finished, pending = await workflow.wait(tasks, return_when=asyncio.ALL_COMPLETED)
        counts = sorted([task.result() for task in finished])
        first = workflow.start_activity_method(Punctuation.emphasise, "bye", start_to_close_timeout=TEN_SECONDS)
        in_order = [await next_done for next_done in workflow.as_completed([first])]
        return {"greeting": greeting, "loud": loud, "local": local, "language": self.language,
                "counts": counts, "pending": len(pending), "as_completed": in_order, "nicknames": self.nicknames}

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.query
    def current_name(self) -> str:
        return self.name

    @workflow.update
    def set_language(self, language: str) -> str:
        previous, self.language = self.language, language
        return previous

    @set_language.validator
    def validate_language(self, language: str) -> None:
        if language not in ("en", "fr"):
            raise ValueError(f"{language} is not supported")


async def test_a_greeting_with_messages_and_activities(env: ScenarioEnv, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with env.worker(workflows=[GreetingWorkflow],
                          activities=[compose_greeting, Punctuation("!!!").emphasise, count_letters]):
        handle = await env.client.start_workflow(GreetingWorkflow.run, "Ada", id=env.workflow_id("greeting"),
                                                 task_queue=env.task_queue)
        assert await handle.query(GreetingWorkflow.current_name) == "Ada"
        assert await handle.execute_update(GreetingWorkflow.set_language, "fr") == "en"
        with pytest.raises(WorkflowUpdateFailedError) as rejected:
            await handle.execute_update(GreetingWorkflow.set_language, "tlh")
        assert "not supported" in str(rejected.value.cause)
        await handle.signal("nickname", "Countess")
        await handle.signal(GreetingWorkflow.finish)
        result = await handle.result()
        assert await handle.query("nicknames") == ["Countess"]
    assert result == {"greeting": "Hello, Ada!", "loud": "Hello, Ada!!!", "local": "Hi, Ada!", "language": "fr",
                      "counts": [5, 8], "pending": 0, "as_completed": ["bye!!!"], "nicknames": ["Countess"]}
    logged = [r.getMessage() for r in caplog.records]
    # As in Temporal, the loggers append the run's (or the activity's) details to the message.
    assert sum(m.startswith("Running workflow with parameter Ada ({'attempt': 1") for m in logged) == 1
    assert sum(m.startswith("Running activity with parameter") and "'activity_type': 'compose_greeting'" in m
               for m in logged) == 2


# -- what a workflow knows: info, time, memo, search attributes, determinism helpers --------------------------------

@workflow.defn
class Introspective:
    @workflow.run
    async def run(self) -> dict[str, object]:
        info: workflow.Info = workflow.info()
        workflow.upsert_memo({"stage": "started"})
        workflow.upsert_search_attributes([PRIORITY.value_set(3)])
        before = workflow.time()
        await workflow.sleep(timedelta(seconds=2))
        return {
            "info": [info.workflow_id == workflow.info().workflow_id, info.workflow_type, info.task_queue,
                     info.namespace, info.attempt, bool(info.run_id)],
            "slept": workflow.time() - before >= 2,
            "time_is_now": workflow.time() == workflow.now().timestamp(),
            "memo": workflow.memo(),
            "owner": workflow.memo_value("owner", type_hint=str),
            "missing": workflow.memo_value("missing", "default"),
            "priority": workflow.info().typed_search_attributes.get(PRIORITY),
            "replaying": workflow.unsafe.is_replaying(),
            "uuid": len(str(workflow.uuid4())),
            "random": 1 <= workflow.random().randint(1, 6) <= 6,
            "patched": workflow.patched("my-change"),
            "length": workflow.info().get_current_history_length() > 0,
            "suggested": workflow.info().is_continue_as_new_suggested(),
            "dumps": json.dumps({"ok": True}),
        }


async def test_info_time_memo_and_helpers(env: ScenarioEnv) -> None:
    await env.client.add_search_attributes([PRIORITY])  # Temporal: the operator service does this
    async with env.worker(workflows=[Introspective]):
        handle = await env.client.start_workflow(Introspective.run, id=env.workflow_id("introspective"),
                                                 task_queue=env.task_queue, memo={"owner": "ada"})
        seen = await handle.result()
    assert seen == {
        "info": [True, "Introspective", env.task_queue, "default", 1, True], "slept": True, "time_is_now": True,
        "memo": {"owner": "ada", "stage": "started"}, "owner": "ada", "missing": "default", "priority": 3,
        "replaying": False, "uuid": 36, "random": True, "patched": True, "length": True, "suggested": False,
        "dumps": '{"ok": true}'}
    assert (await handle.describe()).typed_search_attributes.get(PRIORITY) == 3


# -- children: retried, cancelled through their handle; timeouts of wait_condition ---------------------------------

@workflow.defn
class FlakyChild:
    @workflow.run
    async def run(self, name: str) -> str:
        if workflow.info().attempt < 2:
            raise ApplicationError(f"{name} is not ready")
        return f"{name} done after {workflow.get_last_failure()}"


@workflow.defn
class WaitingChild:
    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


@workflow.defn
class ParentWorkflow:
    @workflow.run
    async def run(self) -> list[str]:
        outcomes = [await workflow.execute_child_workflow(
            FlakyChild.run, "kid", id=f"{workflow.info().workflow_id}-flaky",
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=3))]
        handle = await workflow.start_child_workflow(
            WaitingChild.run, id=f"{workflow.info().workflow_id}-waiting",
            cancellation_type=workflow.ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED)
        handle.cancel()
        try:
            await handle
        except ChildWorkflowError as err:
            outcomes.append(f"child ended by {type(err.cause).__name__}: {isinstance(err.cause, CancelledError)}")
        try:
            await workflow.wait_condition(lambda: False, timeout=timedelta(seconds=1))
        except TimeoutError:
            outcomes.append("wait_condition timed out")
        return outcomes


async def test_children_retried_and_cancelled(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[ParentWorkflow, FlakyChild, WaitingChild]):
        assert await env.client.execute_workflow(ParentWorkflow.run, id=env.workflow_id("parent"),
                                                 task_queue=env.task_queue) == [
            "kid done after kid is not ready", "child ended by CancelledError: True", "wait_condition timed out"]


# -- continue-as-new -----------------------------------------------------------------------------------------------

@workflow.defn(sandboxed=False)  # Temporal's way out of its sandbox; Ostinato has none, so nothing changes
class LoopingWorkflow:
    @workflow.run
    async def run(self, iteration: int) -> int:
        if iteration < 3:
            workflow.continue_as_new(iteration + 1)
        return iteration


async def test_continue_as_new(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[LoopingWorkflow]):
        handle = await env.client.start_workflow(LoopingWorkflow.run, 0, id=env.workflow_id("looping"),
                                                 task_queue=env.task_queue)
        assert await handle.result() == 3
        assert (await env.client.get_workflow_handle(handle.id).describe()).run_id != handle.run_id


# -- dynamic handlers ------------------------------------------------------------------------------------------------

@workflow.defn
class DynamicHandlers:
    """Handles signals and queries it has no method for. A difference: the arguments come as plain values, where
    Temporal passes `Sequence[RawValue]` to decode with `workflow.payload_converter()`."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: "stop" in self.seen)
        workflow.set_dynamic_signal_handler(lambda name, args: self.seen.append(f"late {name}{args}"))
        await workflow.wait_condition(lambda: any(s.startswith("late") for s in self.seen))
        return self.seen

    @workflow.signal(dynamic=True)
    def any_signal(self, name: str, args: Sequence[Any]) -> None:
        self.seen.append(name if not args else f"{name}{list(args)}")

    @workflow.signal
    def named(self) -> None:
        self.seen.append("named handler")

    @workflow.query(dynamic=True)
    def any_query(self, name: str, args: Sequence[Any]) -> str:
        return f"{name}: {len(self.seen)} seen, asked {list(args)}"


async def test_dynamic_signal_and_query_handlers(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[DynamicHandlers]):
        handle = await env.client.start_workflow(DynamicHandlers.run, id=env.workflow_id("dynamic"),
                                                 task_queue=env.task_queue)
        await handle.signal("price", 3)
        await handle.signal(DynamicHandlers.named)
        await handle.signal("stop")

        async def stopped() -> str | None:
            answer: str = await handle.query("how_many", "now")
            return answer if answer.startswith("how_many: 3 seen") else None

        assert await env.wait_until(stopped, what="three signals handled") == "how_many: 3 seen, asked ['now']"
        await handle.signal("bell", "ring")
        assert await handle.result() == ["price[3]", "named handler", "stop", "late bell['ring']"]
