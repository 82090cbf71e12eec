package io.ostinato.worker;

/**
 * Thrown by {@link ActivityContext#heartbeat} once the activity should stop: the workflow asked for it (the
 * worker then answers RespondActivityTaskCanceled) or the worker is shutting down (it answers a retryable
 * {@code WorkerShutdown} failure, so another worker retries at once). Let it propagate.
 */
public final class ActivityCanceledException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public ActivityCanceledException(String message) {
        super(message);
    }
}
