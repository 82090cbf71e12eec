package io.ostinato.worker;

/**
 * An activity taking one argument of a known type: {@code worker.register("charge", Charge.class, (ctx, c) -> ...)}.
 */
@FunctionalInterface
public interface TypedActivity<T> {
    Object execute(ActivityContext ctx, T input) throws Exception;
}
