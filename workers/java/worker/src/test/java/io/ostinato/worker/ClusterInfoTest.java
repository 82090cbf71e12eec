package io.ostinato.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.IOException;
import org.junit.jupiter.api.Test;

/** The answer of GET /api/v1/cluster as services/server.py writes it, and the names derived from it. */
class ClusterInfoTest {
    private static final String ANSWER = "{\"kafka_bootstrap\": \"127.0.0.1:9092\", \"kafka_security\": "
            + "{\"security.protocol\": \"SASL_SSL\", \"sasl.mechanism\": \"SCRAM-SHA-512\"}, "
            + "\"topic_prefix\": \"prod\", \"shards\": 16, \"replication_factor\": 3, \"reply_partitions\": 8, "
            + "\"server_version\": \"0.1.0\"}";

    @Test
    void readsWhatAWorkerNeedsAndNamesTheTopicsAndGroupAsPythonDoes() throws IOException {
        ClusterInfo cluster = ClusterInfo.parse(ANSWER);
        assertEquals(new ClusterInfo("127.0.0.1:9092", "prod", 16, 3, 8, "SASL_SSL"), cluster);
        assertEquals("prod.commands", cluster.commandsTopic());
        assertEquals("prod.replies", cluster.repliesTopic());
        assertEquals("prod.tasks.payments.activity", cluster.taskTopic("payments", "activity"));
        assertEquals("prod-worker-payments", cluster.workerGroup("payments"));
    }

    @Test
    void anAnswerWithoutTheShardCountIsRefused() {
        String noShards = "{\"kafka_bootstrap\": \"x\", \"topic_prefix\": \"p\"}";
        assertThrows(IOException.class, () -> ClusterInfo.parse(noShards));
    }
}
