package io.ostinato.worker;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import org.apache.avro.generic.GenericRecord;

/**
 * Throttles one attempt's heartbeats: the first goes out at once, then at most one per {@code intervalNanos} and
 * one at a time, always with the latest details, so the last details recorded are sent eventually. A heartbeat
 * whose answer says "stop" runs {@code onStop}. The same rules as the Python worker (sdk/activity_executor.py).
 */
final class Heartbeats {
    private static final System.Logger LOG = System.getLogger("ostinato.worker");

    private final ScheduledExecutorService timers;
    private final Function<List<GenericRecord>, CompletableFuture<Boolean>> send;
    private final long intervalNanos;
    private final Runnable onStop;
    private List<GenericRecord> latest = List.of();
    private boolean unsent;
    private long lastSent;
    private boolean everSent;
    private CompletableFuture<Boolean> inFlight;
    private ScheduledFuture<?> timer;
    private boolean closed;

    Heartbeats(ScheduledExecutorService timers, Function<List<GenericRecord>, CompletableFuture<Boolean>> send,
               long intervalNanos, Runnable onStop) {
        this.timers = timers;
        this.send = send;
        this.intervalNanos = intervalNanos;
        this.onStop = onStop;
    }

    synchronized void record(List<GenericRecord> details) {
        if (closed) {
            return;
        }
        latest = details;
        unsent = true;
        pump();
    }

    /** The details recorded last (sent or not): a cancelled attempt answers with them. */
    synchronized List<GenericRecord> latest() {
        return latest;
    }

    private void pump() {
        if (closed || !unsent || inFlight != null || timer != null) {
            return;
        }
        long now = System.nanoTime();
        long due = everSent ? lastSent + intervalNanos : now;
        if (due - now <= 0) {
            deliver();
        } else {
            timer = timers.schedule(this::onTimer, due - now, TimeUnit.NANOSECONDS);
        }
    }

    private synchronized void onTimer() {
        timer = null;
        pump();
    }

    private CompletableFuture<Boolean> deliver() {
        List<GenericRecord> details = latest;
        unsent = false;
        everSent = true;
        lastSent = System.nanoTime();
        CompletableFuture<Boolean> sent;
        try {
            sent = send.apply(details);
        } catch (RuntimeException e) {
            sent = CompletableFuture.failedFuture(e);
        }
        CompletableFuture<Boolean> tracked = sent.handle((stop, err) -> {
            if (err != null) {
                LOG.log(System.Logger.Level.WARNING, "an activity heartbeat could not be sent: " + err);
            }
            boolean stopNow;
            synchronized (this) {
                inFlight = null;
                stopNow = err == null && Boolean.TRUE.equals(stop) && !closed;
                pump();
            }
            if (stopNow) {
                onStop.run();
            }
            return stop;
        });
        // The handler may already have run (an immediate failure): only a pending send is in flight.
        if (!tracked.isDone()) {
            inFlight = tracked;
        }
        return tracked;
    }

    /** Stop throttling; wait for the heartbeat in flight, then (if {@code flush}) send details not sent yet. */
    void drain(boolean flush) {
        CompletableFuture<Boolean> waitFor;
        synchronized (this) {
            closed = true;
            if (timer != null) {
                timer.cancel(false);
                timer = null;
            }
            waitFor = inFlight;
        }
        join(waitFor);
        CompletableFuture<Boolean> last = null;
        synchronized (this) {
            if (flush && unsent) {
                last = deliver();
            }
        }
        join(last);
    }

    private static void join(CompletableFuture<Boolean> future) {
        if (future != null) {
            try {
                future.join();
            } catch (RuntimeException e) {
                // Logged by the handler; the answer goes out regardless.
            }
        }
    }
}
