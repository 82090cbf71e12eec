package io.ostinato.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.junit.jupiter.api.Test;

/** The shard of a workflow, in Java, is the one every other Ostinato process computes. */
class KeysTest {
    @Test
    void everyPartitionerVectorMatchesOursAndTheJavaProducersDefault() throws Exception {
        JsonNode vectors;
        try (InputStream in = getClass().getResourceAsStream("/io/ostinato/test-vectors/partitioner.json")) {
            vectors = new ObjectMapper().readTree(in);
        }
        assertTrue(vectors.size() >= 400, "the vectors of schemas/test-vectors/partitioner.json");
        for (JsonNode v : vectors) {
            String key = v.get("key").asText();
            int partitions = v.get("partitions").asInt();
            int expected = v.get("partition").asInt();
            assertEquals(expected, Keys.partitionFor(key, partitions), key + " over " + partitions);
            // What KafkaProducer does with a keyed record and no partition: completions land on the same shard.
            assertEquals(expected, BuiltInPartitioner.partitionForKey(key.getBytes(StandardCharsets.UTF_8),
                    partitions), key + " over " + partitions + " by the default partitioner");
        }
    }

    @Test
    void componentsAreEscapedSoEveryKeySplitsCleanly() {
        assertEquals("default/a%2Fb%25c", Keys.workflowKey("default", "a/b%c"));
        assertEquals("default/order-1", Keys.workflowKey("default", "order-1"));
    }

    @Test
    void theReadmeExampleShards() {
        assertEquals(1, Keys.partitionFor("default/order-1", 4));
        assertEquals(13, Keys.partitionFor("default/order-1", 16));
    }
}
