package io.ostinato.worker;

import java.time.Duration;
import java.util.List;

/**
 * An activity failure with the fields the engine acts on: a {@code type} (matched against the retry policy's
 * {@code non_retryable_error_types}), {@code nonRetryable} (no retry whatever the policy says), details for the
 * workflow, and a {@code nextRetryDelay} that replaces the policy's backoff for the next attempt. The Python
 * workflow sees it as {@code ActivityError} caused by an {@code ApplicationError} with the same fields.
 *
 * <pre>{@code
 * throw ApplicationFailure.newNonRetryableFailure("card declined", "CardDeclined", orderId);
 * throw ApplicationFailure.newFailure("gateway busy", "GatewayBusy").withNextRetryDelay(Duration.ofSeconds(5));
 * }</pre>
 */
public final class ApplicationFailure extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final String type;
    private final boolean nonRetryable;
    private final transient List<Object> details;
    private final Duration nextRetryDelay;

    private ApplicationFailure(String message, String type, boolean nonRetryable, List<Object> details,
                               Duration nextRetryDelay, Throwable cause) {
        super(message, cause);
        this.type = type;
        this.nonRetryable = nonRetryable;
        this.details = details;
        this.nextRetryDelay = nextRetryDelay;
    }

    /** A failure the retry policy may retry. */
    public static ApplicationFailure newFailure(String message, String type, Object... details) {
        return new ApplicationFailure(message, type, false, List.of(nonNull(details)), null, null);
    }

    /** A failure never retried, whatever the retry policy says. */
    public static ApplicationFailure newNonRetryableFailure(String message, String type, Object... details) {
        return new ApplicationFailure(message, type, true, List.of(nonNull(details)), null, null);
    }

    /** The same failure, retried after {@code delay} instead of the retry policy's backoff. */
    public ApplicationFailure withNextRetryDelay(Duration delay) {
        return new ApplicationFailure(getMessage(), type, nonRetryable, details, delay, getCause());
    }

    /** The same failure, with {@code cause} recorded as its cause chain. */
    public ApplicationFailure withCause(Throwable cause) {
        return new ApplicationFailure(getMessage(), type, nonRetryable, details, nextRetryDelay, cause);
    }

    public String getType() {
        return type;
    }

    public boolean isNonRetryable() {
        return nonRetryable;
    }

    public List<Object> getDetails() {
        return details;
    }

    /** Null: the retry policy's own backoff. */
    public Duration getNextRetryDelay() {
        return nextRetryDelay;
    }

    private static Object[] nonNull(Object[] details) {
        // List.of refuses nulls, and a null detail is a legitimate value (binary/null).
        Object[] copy = details == null ? new Object[0] : details.clone();
        for (int i = 0; i < copy.length; i++) {
            if (copy[i] == null) {
                copy[i] = NullDetail.INSTANCE;
            }
        }
        return copy;
    }

    /** Stands for a null detail inside the immutable list; encoded as null. */
    enum NullDetail { INSTANCE }
}
