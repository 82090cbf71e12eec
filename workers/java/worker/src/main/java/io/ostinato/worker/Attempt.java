package io.ostinato.worker;

import java.lang.reflect.Type;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.avro.generic.GenericRecord;

/** One running attempt: the {@link ActivityContext} its activity sees, its cancellation and its heartbeats. */
final class Attempt implements ActivityContext {
    /** Why an attempt was asked to stop; the first reason given is the one answered. */
    enum StopReason {
        /** The workflow asked: answer RespondActivityTaskCanceled. */
        CANCEL_REQUESTED,
        /** The worker is shutting down: answer a retryable WorkerShutdown failure, another worker retries. */
        WORKER_SHUTDOWN
    }

    final GenericRecord task;
    private final ActivityInfo info;
    private final JsonPayloadConverter converter;
    private final Failures failures;
    private final AtomicReference<StopReason> stop = new AtomicReference<>();
    private Heartbeats heartbeats;

    Attempt(GenericRecord task, ActivityInfo info, JsonPayloadConverter converter, Failures failures) {
        this.task = task;
        this.info = info;
        this.converter = converter;
        this.failures = failures;
    }

    void attach(Heartbeats heartbeats) {
        this.heartbeats = heartbeats;
    }

    Heartbeats heartbeats() {
        return heartbeats;
    }

    void requestStop(StopReason reason) {
        stop.compareAndSet(null, reason);
    }

    StopReason stopReason() {
        return stop.get();
    }

    @Override
    public ActivityInfo info() {
        return info;
    }

    @Override
    public void heartbeat(Object... details) {
        // Converted here, so details that cannot be converted raise in the activity, where they were given.
        heartbeats.record(failures.payloads(details == null ? List.of() : Arrays.asList(details)));
        StopReason reason = stop.get();
        if (reason != null) {
            throw new ActivityCanceledException(reason == StopReason.CANCEL_REQUESTED
                    ? "the workflow asked this activity to stop" : "the worker is shutting down");
        }
    }

    @Override
    public boolean isCancelled() {
        return stop.get() != null;
    }

    @Override
    public <T> T heartbeatDetails(int index, Type type) {
        List<Payload> details = info.heartbeatDetails();
        return index < details.size() ? converter.fromPayload(details.get(index), type) : null;
    }
}
