package io.ostinato.worker;

import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.utils.Utils;

/**
 * Record keys and shards (schemas/README.md, "Keys and partitions"): components joined by {@code /}, each with
 * {@code %} and {@code /} escaped, and partition = Kafka's Java default for a keyed record.
 */
public final class Keys {
    private Keys() {
    }

    /** {@code <namespace>/<workflow_id>}: the key of every command, and what decides a workflow's shard. */
    public static String workflowKey(String namespace, String workflowId) {
        return escape(namespace) + "/" + escape(workflowId);
    }

    /** {@code %} first, or the {@code %} of {@code %2F} would be escaped again. */
    static String escape(String component) {
        return component.replace("%", "%25").replace("/", "%2F");
    }

    /**
     * The partition Kafka's default partitioner picks for this key: {@code toPositive(murmur2(utf8)) % n}.
     * Ostinato producers pass it explicitly all the same, so no producer setting can move a workflow's commands.
     */
    public static int partitionFor(String key, int partitions) {
        if (partitions < 1) {
            throw new IllegalArgumentException("partitions must be at least 1, not " + partitions);
        }
        return Utils.toPositive(Utils.murmur2(key.getBytes(StandardCharsets.UTF_8))) % partitions;
    }
}
