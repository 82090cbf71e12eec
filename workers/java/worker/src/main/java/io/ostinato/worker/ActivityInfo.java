package io.ostinato.worker;

import java.time.Duration;
import java.time.Instant;
import java.util.List;

/**
 * What an attempt knows about itself, from its {@code ostinato.task.ActivityTask}.
 *
 * @param heartbeatDetails the details the previous attempt last reported, to resume from (empty on a first
 *     attempt); read them with {@link ActivityContext#heartbeatDetails}
 * @param startedTime when this worker took the attempt (the engine's start-to-close clock runs from about then)
 * @param scheduleToCloseTimeout null when the workflow set none
 * @param heartbeatTimeout null when the workflow set none
 */
public record ActivityInfo(
        String activityId, String activityType, int attempt, String namespace, String workflowId, String runId,
        String workflowType, String taskQueue, long scheduledEventId, Instant scheduledTime,
        Instant currentAttemptScheduledTime, Instant startedTime, Duration startToCloseTimeout,
        Duration scheduleToCloseTimeout, Duration heartbeatTimeout, List<Payload> heartbeatDetails) {

    /** When the engine gives up on this attempt at the latest: start-to-close or schedule-to-close, the earlier. */
    public Instant deadline() {
        Instant deadline = startToCloseTimeout.isZero() ? Instant.MAX : startedTime.plus(startToCloseTimeout);
        if (scheduleToCloseTimeout != null) {
            Instant overall = scheduledTime.plus(scheduleToCloseTimeout);
            if (overall.isBefore(deadline)) {
                deadline = overall;
            }
        }
        return deadline;
    }
}
