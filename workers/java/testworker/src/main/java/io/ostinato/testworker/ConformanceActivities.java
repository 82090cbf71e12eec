package io.ostinato.testworker;

import io.ostinato.worker.ActivityContext;
import io.ostinato.worker.ActivityWorker;
import io.ostinato.worker.ApplicationFailure;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;

/** The activities schemas/conformance/activity_tasks.json expects every worker to serve, in Java. */
final class ConformanceActivities {
    private ConformanceActivities() {
    }

    static void register(ActivityWorker worker) {
        worker.register("conformance.echo", (ctx, input) -> input.size() == 0 ? null : input.get(0, Object.class));
        worker.register("conformance.fail", String.class, (ctx, message) -> {
            throw ApplicationFailure.newNonRetryableFailure(message, "ConformanceFailure", message);
        });
        worker.register("conformance.retry_later", (ctx, input) -> {
            throw ApplicationFailure.newFailure("try again later", "RetryLater")
                    .withNextRetryDelay(Duration.ofMillis(1500));
        });
        worker.register("conformance.info", (ctx, input) -> {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("attempt", ctx.info().attempt());
            out.put("previous", ctx.heartbeatDetails(Object.class));
            return out;
        });
        worker.register("conformance.heartbeat", Integer.class, (ctx, count) -> {
            for (int step = 1; step <= count; step++) {
                ctx.heartbeat(step);
                Thread.sleep(10);
            }
            return count;
        });
        worker.register("conformance.wait_cancel", (ctx, input) -> waitForCancel(ctx));
    }

    private static Object waitForCancel(ActivityContext ctx) throws InterruptedException {
        for (int beats = 1; ; beats++) {
            ctx.heartbeat(beats);  // throws ActivityCanceledException once an answer asked to stop
            Thread.sleep(50);
        }
    }
}
