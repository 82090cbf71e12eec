"""A workflow task whose new events do not fit one record (issue 16): 40 signals of 200 KiB arrive while a task
runs, 8 MiB of events where a record holds 4. The engine dispatches the next task without them (`events_omitted`)
and the worker reads them from history, so the run carries on, on both engines, through the public SDK only."""

from __future__ import annotations

from ostinato import workflow
from tests.e2e.sdk_scenarios.conftest import ScenarioEnv

SIGNALS = 40
SIZE = 200 * 1024


@workflow.defn
class Inbox:
    """Waits for SIGNALS letters and returns how many characters they held."""

    def __init__(self) -> None:
        self.letters: list[str] = []

    @workflow.signal
    def post(self, letter: str) -> None:
        self.letters.append(letter)

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: len(self.letters) >= SIGNALS)
        return sum(len(letter) for letter in self.letters)


async def test_forty_signals_of_200_kib_arriving_while_a_task_runs(env: ScenarioEnv) -> None:
    handle = await env.client.start_workflow(Inbox.run, id=env.workflow_id("inbox"), task_queue=env.task_queue)
    # No worker yet: the first task is dispatched (and counted as started) and waits, so every signal arrives while
    # it runs, and the task after it must carry all of them.
    for i in range(SIGNALS):
        await handle.signal(Inbox.post, f"{i:03d}" + "x" * (SIZE - 3))
    async with env.worker(workflows=[Inbox]):
        assert await handle.result() == SIGNALS * SIZE
    history = await handle.fetch_history()
    kinds = [e["event_type"] for e in history]
    assert kinds.count("WORKFLOW_EXECUTION_SIGNALED") == SIGNALS
    # Task 1 (events 1-3), then the task after the 40 signals, then the close: nothing failed or timed out.
    assert kinds.count("WORKFLOW_TASK_COMPLETED") == 2 and "WORKFLOW_TASK_FAILED" not in kinds
    assert "WORKFLOW_TASK_TIMED_OUT" not in kinds and kinds[-1] == "WORKFLOW_EXECUTION_COMPLETED"
