package io.ostinato.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.avro.generic.GenericRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** The throttling rules, with an interval long enough that only the rules (never the clock) decide. */
class HeartbeatsTest {
    private final ScheduledExecutorService timers = Executors.newSingleThreadScheduledExecutor();
    private final List<List<GenericRecord>> sent = new ArrayList<>();
    private final JsonPayloadConverter converter = new JsonPayloadConverter();

    @AfterEach
    void stop() {
        timers.shutdownNow();
    }

    private List<GenericRecord> details(Object value) {
        return List.of(converter.toPayload(value).toRecord());
    }

    @Test
    void theFirstGoesAtOnceThenOnlyTheLatestWhenDrained() {
        Heartbeats heartbeats = new Heartbeats(timers, d -> {
            sent.add(d);
            return CompletableFuture.completedFuture(false);
        }, TimeUnit.HOURS.toNanos(1), () -> { });
        heartbeats.record(details(1));
        heartbeats.record(details(2));
        heartbeats.record(details(3));
        assertEquals(List.of(details(1)), sent);
        heartbeats.drain(true);
        assertEquals(List.of(details(1), details(3)), sent);
        assertEquals(details(3), heartbeats.latest());
    }

    @Test
    void aSuccessfulAttemptDoesNotFlushAndRecordsNothingAfterClosing() {
        Heartbeats heartbeats = new Heartbeats(timers, d -> {
            sent.add(d);
            return CompletableFuture.completedFuture(false);
        }, TimeUnit.HOURS.toNanos(1), () -> { });
        heartbeats.record(details(1));
        heartbeats.record(details(2));
        heartbeats.drain(false);
        heartbeats.record(details(3));
        assertEquals(List.of(details(1)), sent);
    }

    @Test
    void anAnswerThatSaysStopRunsTheCallbackOnceTheHeartbeatReturns() {
        AtomicBoolean stopped = new AtomicBoolean();
        CompletableFuture<Boolean> answer = new CompletableFuture<>();
        Heartbeats heartbeats = new Heartbeats(timers, d -> answer, TimeUnit.HOURS.toNanos(1),
                () -> stopped.set(true));
        heartbeats.record(details("x"));
        assertTrue(!stopped.get());
        answer.complete(true);
        assertTrue(stopped.get());
    }
}
