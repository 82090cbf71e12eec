package io.ostinato.example;

import io.ostinato.worker.ActivityContext;
import io.ostinato.worker.ActivityMethod;
import io.ostinato.worker.ActivityWorker;
import io.ostinato.worker.ApplicationFailure;
import java.time.Duration;

/**
 * A payment activity served from Java to Ostinato workflows written in Python (workers/java/README.md):
 *
 * <pre>
 *   java -cp 'example/target/*:example/target/lib/*' io.ostinato.example.PaymentWorker http://127.0.0.1:7243 payments
 * </pre>
 */
public final class PaymentWorker {
    /** What the workflow passes: {@code {"order": "o-1", "amount": 42.5, "card": "4242..."}}. */
    public record Charge(String order, double amount, String card) {
    }

    /** What the workflow gets back. */
    public record Receipt(String order, double amount, String transaction, int attempt) {
    }

    /** The annotation style: every {@link ActivityMethod} of the object becomes an activity. */
    public static final class Payments {
        @ActivityMethod(name = "charge")
        public Receipt charge(ActivityContext ctx, Charge charge) {
            if (charge.card() == null || charge.card().startsWith("0000")) {
                // Retrying would not help: the workflow sees ActivityError caused by ApplicationError CardDeclined.
                throw ApplicationFailure.newNonRetryableFailure("card declined", "CardDeclined", charge.order());
            }
            if (charge.amount() > 10_000 && ctx.info().attempt() < 3) {
                // A busy gateway: retried, after the delay it asks for rather than the policy's backoff.
                throw ApplicationFailure.newFailure("gateway busy", "GatewayBusy")
                        .withNextRetryDelay(Duration.ofMillis(500));
            }
            ctx.heartbeat(charge.order());
            return new Receipt(charge.order(), charge.amount(), "tx-" + charge.order(), ctx.info().attempt());
        }
    }

    private PaymentWorker() {
    }

    public static void main(String[] args) throws Exception {
        String server = args.length > 0 ? args[0] : "http://127.0.0.1:7243";
        String queue = args.length > 1 ? args[1] : "payments";
        ActivityWorker worker = ActivityWorker.newBuilder(server, queue).build();
        worker.registerActivities(new Payments());
        // The lambda style, for a one-off: the argument is read in the type the activity wants.
        worker.register("refund", (ctx, input) -> "refunded " + input.get(0, String.class));
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                worker.close();  // hands running attempts back to the engine for another worker
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        worker.run();
    }
}
