package io.ostinato.worker;

/**
 * An activity implementation: {@code worker.register("charge", (ctx, input) -> ...)}. The value returned is the
 * activity's result (converted to JSON); an exception fails the attempt, retried by the workflow's retry policy
 * unless it is a non-retryable {@link ApplicationFailure}.
 */
@FunctionalInterface
public interface Activity {
    Object execute(ActivityContext ctx, ActivityInput input) throws Exception;
}
