package io.ostinato.worker;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.avro.generic.GenericRecord;

/**
 * Runs one activity attempt to its answer: decodes nothing up front (the activity asks for its arguments), calls
 * the activity, relays its heartbeats, and turns how it ended into RespondActivityTask{Completed,Failed,Canceled}.
 * Independent of how tasks arrive, like the Python SDK's ActivityExecutor.
 */
final class ActivityRunner {
    private static final System.Logger LOG = System.getLogger("ostinato.worker");
    /** Of the heartbeat timeout: a heartbeat goes out well before the engine gives up. */
    static final double HEARTBEAT_FRACTION = 0.8;
    static final Duration DEFAULT_HEARTBEAT_INTERVAL = Duration.ofSeconds(30);
    /**
     * How long a heartbeat waits for its answer (whether cancellation was asked) before the attempt goes on
     * without it; the next heartbeat asks again. At most a quarter of the heartbeat timeout.
     */
    static final Duration HEARTBEAT_ANSWER_WAIT = Duration.ofMillis(250);

    private final Map<String, Activity> activities;
    private final JsonPayloadConverter converter;
    private final Failures failures;
    private final Engine engine;
    private final ScheduledExecutorService timers;
    private final String identity;

    ActivityRunner(Map<String, Activity> activities, JsonPayloadConverter converter, Engine engine,
                   ScheduledExecutorService timers, String identity) {
        this.activities = activities;
        this.converter = converter;
        this.failures = new Failures(converter);
        this.engine = engine;
        this.timers = timers;
        this.identity = identity;
    }

    /** Run the attempt on the calling thread and send its answer; {@code running} holds it meanwhile. */
    void run(GenericRecord task, Instant started, Set<Attempt> running) {
        Attempt attempt = new Attempt(task, info(task, started), converter, failures);
        Long heartbeatTimeoutMs = (Long) task.get("heartbeat_timeout_ms");
        long timeoutMs = heartbeatTimeoutMs == null ? 0 : heartbeatTimeoutMs;
        long intervalNanos = timeoutMs > 0 ? (long) (timeoutMs * HEARTBEAT_FRACTION * 1_000_000)
                : DEFAULT_HEARTBEAT_INTERVAL.toNanos();
        Duration answerWait = timeoutMs > 0 && timeoutMs / 4 < HEARTBEAT_ANSWER_WAIT.toMillis()
                ? Duration.ofMillis(timeoutMs / 4) : HEARTBEAT_ANSWER_WAIT;
        attempt.attach(new Heartbeats(timers, details -> heartbeat(task, details, answerWait), intervalNanos,
                () -> attempt.requestStop(Attempt.StopReason.CANCEL_REQUESTED)));
        running.add(attempt);
        GenericRecord answer;
        try {
            answer = outcome(attempt);
        } finally {
            running.remove(attempt);
        }
        // A failed attempt's last details must reach the engine first: the retry resumes from them.
        attempt.heartbeats().drain(answer.getSchema().getName().equals("RespondActivityTaskFailed"));
        engine.send(task, answer, (meta, err) -> {
            if (err != null) {  // the engine's timeout retries the attempt
                LOG.log(System.Logger.Level.WARNING, "the answer to activity " + task.get("activity_id") + " of "
                        + task.get("workflow_id") + " was not delivered: " + err);
            }
        });
    }

    private CompletableFuture<Boolean> heartbeat(GenericRecord task, List<GenericRecord> details, Duration wait) {
        GenericRecord body = Engine.body("RecordActivityTaskHeartbeat", task).set("details", details).build();
        return engine.request(task, body, wait).thenApply(reply -> reply.map(Engine::stopRequested).orElse(false));
    }

    private GenericRecord outcome(Attempt attempt) {
        GenericRecord task = attempt.task;
        String type = task.get("activity_type").toString();
        Activity activity = activities.get(type);
        if (activity == null) {
            return failed(task, ApplicationFailure.newNonRetryableFailure("activity type " + type
                    + " is not registered on worker " + identity + " (registered: "
                    + String.join(", ", new TreeSet<>(activities.keySet())) + ")", "ActivityNotRegistered"));
        }
        Object result;
        try {
            result = activity.execute(attempt, new ActivityInput(payloads(task.get("input")), converter));
        } catch (ActivityCanceledException e) {
            return cancelled(attempt, e);
        } catch (VirtualMachineError e) {
            throw e;
        } catch (Throwable e) {  // any failure of user code is the attempt's failure
            return failed(task, e);
        }
        try {
            return Engine.body("RespondActivityTaskCompleted", task)
                    .set("result", List.of(converter.toPayload(result).toRecord())).build();
        } catch (RuntimeException e) {  // a result that cannot be converted fails the attempt
            return failed(task, e);
        }
    }

    private GenericRecord cancelled(Attempt attempt, ActivityCanceledException e) {
        Attempt.StopReason reason = attempt.stopReason();
        if (reason == Attempt.StopReason.CANCEL_REQUESTED) {
            return Engine.body("RespondActivityTaskCanceled", attempt.task)
                    .set("details", attempt.heartbeats().latest()).build();
        }
        if (reason == Attempt.StopReason.WORKER_SHUTDOWN) {
            return failed(attempt.task,
                    ApplicationFailure.newFailure("the worker is shutting down", "WorkerShutdown").withCause(e));
        }
        return failed(attempt.task, ApplicationFailure.newFailure(
                "activity cancelled without a cancellation request", "CancelledError").withCause(e));
    }

    private GenericRecord failed(GenericRecord task, Throwable error) {
        LOG.log(System.Logger.Level.WARNING, "activity " + task.get("activity_id") + " (" + task.get("activity_type")
                + ") attempt " + task.get("attempt") + " of workflow " + task.get("workflow_id") + " failed: "
                + error);
        GenericRecord failure;
        try {
            failure = failures.encode(error);
        } catch (RuntimeException e) {  // the failure must go out even when its details cannot
            failure = failures.encode(ApplicationFailure.newFailure(error + " (its details could not be converted: "
                    + e.getMessage() + ")", error.getClass().getSimpleName()));
        }
        return Engine.body("RespondActivityTaskFailed", task).set("failure", failure).build();
    }

    static ActivityInfo info(GenericRecord task, Instant started) {
        return new ActivityInfo(str(task, "activity_id"), str(task, "activity_type"), (Integer) task.get("attempt"),
                str(task, "namespace"), str(task, "workflow_id"), str(task, "run_id"), str(task, "workflow_type"),
                str(task, "task_queue"), (Long) task.get("scheduled_event_id"),
                Instant.ofEpochMilli((Long) task.get("scheduled_time_ms")),
                Instant.ofEpochMilli((Long) task.get("current_attempt_scheduled_time_ms")), started,
                Duration.ofMillis((Long) task.get("start_to_close_timeout_ms")),
                duration(task.get("schedule_to_close_timeout_ms")), duration(task.get("heartbeat_timeout_ms")),
                payloads(task.get("heartbeat_details")));
    }

    /**
     * Whether an attempt handed over {@code waited} after we asked must not run: past 75% of its shortest
     * timeout the engine may already have retried it elsewhere, and the work would run twice. Not running it
     * costs a retry after the timeout, never a double effect (the Python worker's LATE_FRACTION).
     */
    static boolean tooLate(GenericRecord task, long waitedNanos) {
        long shortest = Long.MAX_VALUE;
        for (String field : new String[] {"heartbeat_timeout_ms", "start_to_close_timeout_ms"}) {
            Long ms = (Long) task.get(field);
            if (ms != null && ms > 0) {
                shortest = Math.min(shortest, ms);
            }
        }
        return shortest != Long.MAX_VALUE && TimeUnit.NANOSECONDS.toMillis(waitedNanos) > 0.75 * shortest;
    }

    private static String str(GenericRecord record, String field) {
        return record.get(field).toString();
    }

    private static Duration duration(Object ms) {
        return ms == null ? null : Duration.ofMillis((Long) ms);
    }

    private static List<Payload> payloads(Object records) {
        List<Payload> out = new ArrayList<>();
        for (Object record : (List<?>) records) {
            out.add(Payload.fromRecord((GenericRecord) record));
        }
        return out;
    }
}
