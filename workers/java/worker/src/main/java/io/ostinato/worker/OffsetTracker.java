package io.ostinato.worker;

import java.util.Collection;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * Per partition, the offsets handed to tasks and not yet done; what may be committed is the first of them (or
 * past the last seen when none is pending), so a crash re-reads whatever was unfinished and nothing before it.
 * Only the poll thread touches it (the consumer is not thread-safe either).
 */
final class OffsetTracker {
    private final Map<TopicPartition, TreeSet<Long>> pending = new HashMap<>();
    private final Map<TopicPartition, Long> next = new HashMap<>();
    private final Map<TopicPartition, Long> committed = new HashMap<>();

    void begin(TopicPartition tp, long offset) {
        pending.computeIfAbsent(tp, k -> new TreeSet<>()).add(offset);
        next.merge(tp, offset + 1, Math::max);
    }

    void done(TopicPartition tp, long offset) {
        TreeSet<Long> set = pending.get(tp);
        if (set != null) {
            set.remove(offset);
        }
    }

    /** Offsets that moved forward since the last call. */
    Map<TopicPartition, OffsetAndMetadata> committable() {
        Map<TopicPartition, OffsetAndMetadata> out = new HashMap<>();
        for (Map.Entry<TopicPartition, Long> e : next.entrySet()) {
            TreeSet<Long> set = pending.get(e.getKey());
            long upto = set == null || set.isEmpty() ? e.getValue() : set.first();
            if (upto > committed.getOrDefault(e.getKey(), -1L)) {
                committed.put(e.getKey(), upto);
                out.put(e.getKey(), new OffsetAndMetadata(upto));
            }
        }
        return out;
    }

    /** Revoked partitions: their tasks may still finish, but the next owner commits them. */
    void forget(Collection<TopicPartition> partitions) {
        for (TopicPartition tp : partitions) {
            pending.remove(tp);
            next.remove(tp);
            committed.remove(tp);
        }
    }

    boolean idle() {
        return pending.values().stream().allMatch(TreeSet::isEmpty);
    }
}
