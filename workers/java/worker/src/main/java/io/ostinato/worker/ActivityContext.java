package io.ostinato.worker;

import java.lang.reflect.Type;

/**
 * What a running activity may ask of its worker. One per attempt; its methods may be called from any thread.
 */
public interface ActivityContext {
    /** The attempt: ids, attempt number, deadlines, the previous attempt's heartbeat details. */
    ActivityInfo info();

    /**
     * Report progress. The engine resets the heartbeat timeout, a retry starts with the last details reported,
     * and the answer says whether the workflow asked the activity to stop. Throttled: the first heartbeat goes
     * out at once, then at most one per 80% of the heartbeat timeout, always with the latest details.
     *
     * @throws ActivityCanceledException when the activity should stop (cancel requested or worker shutdown)
     */
    void heartbeat(Object... details);

    /** Whether the activity was asked to stop; learned from heartbeat answers, so heartbeat to hear it. */
    boolean isCancelled();

    /** The previous attempt's heartbeat detail {@code index} as {@code type}, or null if it reported none. */
    <T> T heartbeatDetails(int index, Type type);

    /** Shorthand for the first heartbeat detail of the previous attempt. */
    default <T> T heartbeatDetails(Class<T> type) {
        return heartbeatDetails(0, type);
    }
}
