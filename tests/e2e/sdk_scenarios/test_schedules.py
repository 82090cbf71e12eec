"""Schedules as a user drives them (issue 21): a cron schedule over virtual days, each overlap policy, pause and
trigger, backfill of a day, list and delete; on the time-skipping engine and on a real broker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from ostinato.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleBackfill,
    ScheduleCalendarSpec,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleRange,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from ostinato.exceptions import RPCError
from tests.e2e.sdk_scenarios.conftest import ScenarioEnv
from tests.e2e.sdk_scenarios.schedule_workflows import Blocker, Stamp

FAR = ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(days=365))])  # never due during a test
SECOND = timedelta(seconds=1.1)  # an action's workflow id names its second: triggers one second apart


def _stamp(env: ScenarioEnv, stem: str) -> ScheduleActionStartWorkflow:
    return ScheduleActionStartWorkflow(Stamp.run, stem, id=env.workflow_id(stem), task_queue=env.task_queue)


@pytest.mark.parametrize("env", ["time-skipping"], indirect=True)  # five virtual days
async def test_cron_schedule_takes_five_actions_over_five_days(env: ScenarioEnv) -> None:
    """A cron schedule at 09:00 Paris time: five days pass, five runs start at 09:00 local, each completes, and
    describe shows them as recent actions, with the next ten 09:00s to come."""
    paris = ZoneInfo("Europe/Paris")
    async with env.worker(workflows=[Stamp]):
        handle = await env.client.create_schedule(env.workflow_id("daily"), Schedule(
            action=_stamp(env, "report"), spec=ScheduleSpec(cron_expressions=["0 9 * * *"],
                                                            time_zone_name="Europe/Paris")))
        start = env.now()
        await env.sleep(timedelta(days=5))
        described = await handle.describe()
        first = await env.client.get_workflow_handle(described.info.recent_actions[0].action.workflow_id).describe()
    assert first.parent_id is None  # its schedule is no parent, as in Temporal
    info = described.info
    assert info.num_actions == 5
    assert [a.status for a in info.recent_actions] == ["COMPLETED"] * 5
    local = [a.scheduled_at.astimezone(paris) for a in info.recent_actions]
    assert all((t.hour, t.minute, t.second) == (9, 0, 0) for t in local)
    assert len({t.date() for t in local}) == 5 and all(start < a.scheduled_at <= env.now() for a in info.recent_actions)
    assert [a.action.workflow_id for a in info.recent_actions] == [
        f"{described.schedule.action.id}-{a.scheduled_at.strftime('%Y-%m-%dT%H:%M:%SZ')}" for a in info.recent_actions]
    assert len(info.next_action_times) == 10
    assert all(t.astimezone(paris).hour == 9 and t > env.now() for t in info.next_action_times)
    assert info.running_actions == []


async def _overlapping(env: ScenarioEnv, overlap: ScheduleOverlapPolicy) -> ScheduleDescription:
    """Three triggers a second apart while the first run blocks; then release whatever runs until none does."""
    handle = await env.client.create_schedule(env.workflow_id(f"overlap-{overlap.name.lower()}"), Schedule(
        action=ScheduleActionStartWorkflow(Blocker.run, id=env.workflow_id("blocker"), task_queue=env.task_queue),
        spec=FAR, policy=SchedulePolicy(overlap=overlap)))
    for _ in range(3):
        await handle.trigger()
        await env.sleep(SECOND)

    released: set[str] = set()

    async def settled() -> ScheduleDescription | None:
        described = await handle.describe()
        running = described.info.running_actions
        if running and all(r.first_execution_run_id for r in running):
            for r in running:  # release what runs, so buffered actions start
                if r.workflow_id not in released:
                    released.add(r.workflow_id)
                    await env.client.get_workflow_handle(r.workflow_id).signal(Blocker.release)
            return None
        return described if not running and not described.info.buffered_actions else None

    return await env.wait_until(settled, what=f"the {overlap.name} actions to finish", timeout_s=30)


@pytest.mark.parametrize("overlap, statuses, skipped", [
    (ScheduleOverlapPolicy.SKIP, ["COMPLETED"], 2),
    (ScheduleOverlapPolicy.BUFFER_ONE, ["COMPLETED", "COMPLETED"], 1),
    (ScheduleOverlapPolicy.BUFFER_ALL, ["COMPLETED", "COMPLETED", "COMPLETED"], 0),
    (ScheduleOverlapPolicy.ALLOW_ALL, ["COMPLETED", "COMPLETED", "COMPLETED"], 0),
], ids=lambda v: v.name if isinstance(v, ScheduleOverlapPolicy) else None)
async def test_overlap_policy_keeping_runs(env: ScenarioEnv, overlap: ScheduleOverlapPolicy, statuses: list[str],
                                           skipped: int) -> None:
    """Three actions while the first still runs: SKIP drops the others, BUFFER_ONE keeps one (each buffered action
    starts when the one before closes), BUFFER_ALL keeps all, ALLOW_ALL runs all at once."""
    async with env.worker(workflows=[Blocker]):
        described = await _overlapping(env, overlap)
    info = described.info
    assert [a.status for a in info.recent_actions] == statuses
    assert info.num_actions == len(statuses)
    assert info.num_actions_skipped_overlap == skipped


@pytest.mark.parametrize("overlap, stopped", [
    (ScheduleOverlapPolicy.CANCEL_OTHER, "CANCELED"), (ScheduleOverlapPolicy.TERMINATE_OTHER, "TERMINATED"),
], ids=lambda v: v.name if isinstance(v, ScheduleOverlapPolicy) else None)
async def test_overlap_policy_stopping_runs(env: ScenarioEnv, overlap: ScheduleOverlapPolicy, stopped: str) -> None:
    """Three actions while the first still runs: CANCEL_OTHER and TERMINATE_OTHER stop what runs and start the
    newest once it has closed (an action still buffered when a newer one comes is replaced, counted as skipped)."""
    async with env.worker(workflows=[Blocker]):
        described = await _overlapping(env, overlap)
    info = described.info
    statuses = [a.status for a in info.recent_actions]
    assert statuses[-1] == "COMPLETED" and set(statuses[:-1]) == {stopped}
    assert info.num_actions + info.num_actions_skipped_overlap == 3


async def _with_note(handle: ScheduleHandle, note: str) -> ScheduleDescription | None:
    """The description once it shows `note` (a read may trail a write by a commit on a real engine)."""
    described = await handle.describe()
    return described if described.schedule.state.note == note else None


async def test_pause_trigger_unpause_and_delete(env: ScenarioEnv) -> None:
    """A paused schedule has no upcoming actions yet can be triggered; notes say why; unpausing brings its times
    back; a second create is refused; list shows it; delete ends it."""
    schedule_id = env.workflow_id("paused")
    async with env.worker(workflows=[Stamp]):
        handle = await env.client.create_schedule(schedule_id, Schedule(
            action=_stamp(env, "paused"), spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(
                every=timedelta(hours=1), offset=timedelta(minutes=5))]),
            state=ScheduleState(paused=True, note="created paused")))
        with pytest.raises(ScheduleAlreadyRunningError):
            await env.client.create_schedule(schedule_id, Schedule(action=_stamp(env, "again"), spec=FAR))
        described = await handle.describe()
        assert (described.schedule.state.paused, described.schedule.state.note) == (True, "created paused")
        assert described.info.next_action_times == []
        await handle.trigger()

        async def completed() -> ScheduleDescription | None:
            found = await handle.describe()
            return found if [a.status for a in found.info.recent_actions] == ["COMPLETED"] else None

        described = await env.wait_until(completed, what="the triggered action to complete")
        assert described.info.num_actions == 1
        await handle.unpause(note="back to work")
        described = await env.wait_until(lambda: _with_note(handle, "back to work"), what="the unpause")
        assert not described.schedule.state.paused
        times = described.info.next_action_times
        assert len(times) == 10 and all((t.minute, t.second) == (5, 0) for t in times)
        await handle.pause(note="maintenance")
        described = await env.wait_until(lambda: _with_note(handle, "maintenance"), what="the pause")
        assert described.schedule.state.paused and described.info.next_action_times == []

        async def listed() -> list[str] | None:
            ids = [s.id async for s in await env.client.list_schedules()]
            return ids if schedule_id in ids else None

        await env.wait_until(listed, what="the schedule to be listed")
        await handle.delete()

        async def gone() -> str | None:
            try:
                await handle.describe()
            except RPCError as e:
                return e.code
            return None

        assert await env.wait_until(gone, what="the schedule to be deleted") == "NOT_FOUND"


async def test_backfill_of_a_day(env: ScenarioEnv) -> None:
    """Backfilling one day of an hourly calendar (minute 30) starts its 24 actions now, one per hour of that day,
    each as `<id>-<that hour>`, none counted against limited actions."""
    day = datetime(2024, 3, 1, tzinfo=UTC)
    async with env.worker(workflows=[Stamp]):
        handle = await env.client.create_schedule(env.workflow_id("backfill"), Schedule(
            action=_stamp(env, "backfill"),
            spec=ScheduleSpec(calendars=[ScheduleCalendarSpec(hour=[ScheduleRange(0, 23)],
                                                              minute=[ScheduleRange(30)])]),
            policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.ALLOW_ALL),
            state=ScheduleState(paused=True, limited_actions=True, remaining_actions=1)))
        await handle.backfill(ScheduleBackfill(start_at=day, end_at=day + timedelta(days=1) - timedelta(seconds=1)))

        async def done() -> ScheduleDescription | None:
            found = await handle.describe()
            return found if not found.info.running_actions else None

        described = await env.wait_until(done, what="the backfilled actions to complete", timeout_s=30)
    info = described.info
    assert info.num_actions == 24
    assert described.schedule.state.remaining_actions == 1
    hours = [day + timedelta(hours=h, minutes=30) for h in range(14, 24)]  # the last ten
    assert [a.scheduled_at for a in info.recent_actions] == hours
    assert all(a.status == "COMPLETED" for a in info.recent_actions)
    assert info.recent_actions[-1].action.workflow_id.endswith("-2024-03-01T23:30:00Z")


@pytest.mark.parametrize("env", ["time-skipping"], indirect=True)  # hours of virtual time
async def test_update_replaces_the_spec_and_keeps_the_progress(env: ScenarioEnv) -> None:
    """`update(updater)` (async or not) gets the description and returns the new schedule: the new spec applies from
    now, the counts stay, and an updater returning None changes nothing."""
    async with env.worker(workflows=[Stamp]):
        handle = await env.client.create_schedule(env.workflow_id("updated"), Schedule(
            action=_stamp(env, "v1"), spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(hours=1))])))
        await env.sleep(timedelta(hours=2))

        async def hourly_to_daily(update: ScheduleUpdateInput) -> ScheduleUpdate:
            schedule = update.description.schedule
            schedule.spec = ScheduleSpec(cron_expressions=["0 6 * * *"])
            schedule.action.args = ["v2"]
            return ScheduleUpdate(schedule)

        await handle.update(hourly_to_daily)
        await handle.update(lambda _: None)
        await env.sleep(timedelta(days=1))
        described = await handle.describe()
    assert described.schedule.spec.cron_expressions == ["0 6 * * *"]
    assert described.schedule.action.args == ["v2"]
    assert described.info.num_actions == 3 and described.info.last_updated_at is not None
    last = described.info.recent_actions[-1]
    assert (last.scheduled_at.hour, last.scheduled_at.minute) == (6, 0)
    result = await env.client.get_workflow_handle(last.action.workflow_id).result()
    assert result.startswith("v2@")
