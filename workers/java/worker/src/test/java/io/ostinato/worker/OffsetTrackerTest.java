package io.ostinato.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/** A crash re-reads whatever was unfinished, and nothing before it. */
class OffsetTrackerTest {
    private final TopicPartition tp = new TopicPartition("t", 0);

    @Test
    void commitsUpToTheFirstTaskNotDone() {
        OffsetTracker offsets = new OffsetTracker();
        offsets.begin(tp, 5);
        offsets.begin(tp, 6);
        offsets.begin(tp, 7);
        offsets.done(tp, 6);
        assertEquals(Map.of(tp, new OffsetAndMetadata(5)), offsets.committable());
        assertEquals(Map.of(), offsets.committable());  // nothing moved
        offsets.done(tp, 5);
        assertEquals(Map.of(tp, new OffsetAndMetadata(7)), offsets.committable());
        offsets.done(tp, 7);
        assertEquals(Map.of(tp, new OffsetAndMetadata(8)), offsets.committable());
    }

    @Test
    void revokedPartitionsAreForgotten() {
        OffsetTracker offsets = new OffsetTracker();
        offsets.begin(tp, 1);
        offsets.forget(List.of(tp));
        offsets.done(tp, 1);
        assertEquals(Map.of(), offsets.committable());
    }
}
