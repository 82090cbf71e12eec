package io.ostinato.testworker;

import io.ostinato.worker.ActivityContext;
import io.ostinato.worker.ActivityInfo;
import io.ostinato.worker.ActivityMethod;
import io.ostinato.worker.ActivityWorker;
import io.ostinato.worker.ApplicationFailure;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The Java worker tests/integration/test_java_worker.py drives: one activity per behaviour the Python workflow
 * checks (results, retries, non-retryable failures, heartbeats, cancellation, a worker killed mid-attempt).
 * Activities that must be observed from outside write a marker file named by their workflow id.
 *
 * <pre>java -cp 'testworker/target/*:testworker/target/lib/*' io.ostinato.testworker.TestWorker SERVER QUEUE</pre>
 */
public final class TestWorker {
    /** The input of most activities: what to charge, and where to leave markers. */
    public record Order(String order, double amount, String markers) {
    }

    /** The annotation style. */
    public static final class Activities {
        @ActivityMethod(name = "java_charge")
        public Map<String, Object> charge(ActivityContext ctx, Order order) {
            ActivityInfo info = ctx.info();
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("order", order.order());
            out.put("charged", order.amount());
            out.put("by", "java");
            out.put("attempt", info.attempt());
            out.put("activity_type", info.activityType());
            out.put("workflow_id", info.workflowId());
            out.put("deadline_after_start", info.deadline().isAfter(info.startedTime()));
            return out;
        }

        /** Fails twice with a retryable failure that asks for its own retry delay, then succeeds. */
        @ActivityMethod(name = "java_flaky")
        public String flaky(ActivityContext ctx, String order) {
            int attempt = ctx.info().attempt();
            if (attempt < 3) {
                throw ApplicationFailure.newFailure("gateway busy on attempt " + attempt, "GatewayBusy")
                        .withNextRetryDelay(Duration.ofMillis(100));
            }
            return order + " ok on attempt " + attempt;
        }

        /** Sleeps, then tells which attempt it was: for the backpressure test, where each slot is one at a time. */
        @ActivityMethod(name = "java_sleep")
        public int sleep(ActivityContext ctx, long millis) throws InterruptedException {
            Thread.sleep(millis);
            return ctx.info().attempt();
        }

        /** A failure no retry policy retries. */
        @ActivityMethod(name = "java_decline")
        public String decline(ActivityContext ctx, String order) {
            throw ApplicationFailure.newNonRetryableFailure("card declined on attempt " + ctx.info().attempt(),
                    "CardDeclined", order, 402);
        }

        /**
         * Heartbeats its progress every 100 ms (kept alive only by them: the heartbeat timeout is shorter than the
         * run); attempt 1 fails after step 3, attempt 2 resumes from the details attempt 1 reported.
         */
        @ActivityMethod(name = "java_progress")
        public Map<String, Object> progress(ActivityContext ctx, int steps) throws InterruptedException {
            Integer resumed = ctx.heartbeatDetails(Integer.class);
            int from = resumed == null ? 0 : resumed;
            for (int step = from + 1; step <= steps; step++) {
                Thread.sleep(100);
                ctx.heartbeat(step);
                if (ctx.info().attempt() == 1 && step == 3) {
                    throw ApplicationFailure.newFailure("lost the connection after step 3", "Flaky");
                }
            }
            return Map.of("resumed_from", from, "attempt", ctx.info().attempt(), "steps", steps);
        }
    }

    private TestWorker() {
    }

    /** Heartbeats until the workflow cancels it; answers Canceled with the count it reached. */
    static Object waitForCancel(ActivityContext ctx, String markers) throws Exception {
        marker(markers, ctx.info().workflowId() + ".started", "");
        for (int beats = 1; ; beats++) {
            Thread.sleep(100);
            ctx.heartbeat(beats);  // throws ActivityCanceledException once the workflow asked
        }
    }

    /** Runs until killed (or cancelled), leaving this process's id where the test can find it. */
    static Object hang(ActivityContext ctx, String markers) throws Exception {
        marker(markers, ctx.info().workflowId() + ".pid", String.valueOf(ProcessHandle.current().pid()));
        while (true) {
            Thread.sleep(100);
            ctx.heartbeat();
        }
    }

    private static void marker(String dir, String name, String text) throws Exception {
        Path tmp = Path.of(dir, name + ".tmp");
        Files.writeString(tmp, text, StandardCharsets.UTF_8);
        Files.move(tmp, Path.of(dir, name), java.nio.file.StandardCopyOption.ATOMIC_MOVE);
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: TestWorker SERVER_URL TASK_QUEUE [MAX_CONCURRENT]");
            System.exit(2);
        }
        ActivityWorker.Builder builder = ActivityWorker.newBuilder(args[0], args[1]).identity("java-test-worker");
        if (args.length > 2) {
            builder.maxConcurrentActivities(Integer.parseInt(args[2]));
        }
        ActivityWorker worker = builder.build();
        worker.registerActivities(new Activities());
        worker.register("java_wait_cancel", (ctx, input) -> waitForCancel(ctx, input.get(0, String.class)));
        worker.register("java_hang", String.class, TestWorker::hang);
        ConformanceActivities.register(worker);
        worker.register("java_echo", (ctx, input) -> input.payloads().size() == 0 ? null : input.get(0, Object.class));
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                worker.close();
                // Not through java.util.logging: the JVM resets it when shutdown hooks start.
                System.out.println("closed " + worker.identity());
                System.out.flush();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        worker.start();
        System.out.println("ready " + worker.identity() + " " + String.join(",", worker.activityTypes()));
        System.out.flush();
        worker.run();
    }
}
