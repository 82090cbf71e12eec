package io.ostinato.worker;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.errors.TopicExistsException;

/**
 * A queue's task topics, created on first use by whoever comes first (processor or worker), with the partition
 * count and configs of schemas/topics.py {@code task_topic_spec}: every process must address them alike.
 */
final class TaskTopics {
    private static final System.Logger LOG = System.getLogger("ostinato.worker");
    static final int PARTITIONS = 4;  // DEFAULT_TASK_QUEUE_PARTITIONS
    static final String RETENTION_MS = String.valueOf(7L * 24 * 3600 * 1000);

    private final ClusterInfo cluster;
    private final Properties kafka;

    TaskTopics(ClusterInfo cluster, Properties kafka) {
        this.cluster = cluster;
        this.kafka = kafka;
    }

    /** Create both topics of {@code queue} unless they exist; a worker that may not create them waits in its poll. */
    void ensure(String queue) {
        Properties props = new Properties();
        props.put("bootstrap.servers", cluster.kafkaBootstrap());
        props.putAll(kafka);
        int rf = cluster.replicationFactor();
        Map<String, String> configs = Map.of(
                "min.insync.replicas", rf >= 3 ? "2" : "1",
                "max.message.bytes", String.valueOf(KafkaSettings.MAX_RECORD_BYTES),
                "cleanup.policy", "delete",
                "retention.ms", RETENTION_MS);
        List<NewTopic> topics = new ArrayList<>();
        for (String kind : List.of("workflow", "activity")) {
            topics.add(new NewTopic(cluster.taskTopic(queue, kind), PARTITIONS, (short) rf).configs(configs));
        }
        try (Admin admin = Admin.create(props)) {
            admin.createTopics(topics).values().forEach((name, future) -> {
                try {
                    future.get();
                    LOG.log(System.Logger.Level.INFO, "created task topic " + name);
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof TopicExistsException)) {
                        LOG.log(System.Logger.Level.WARNING, "cannot create " + name + " (" + e.getCause()
                                + "); it is read once the server creates it");
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
        }
    }
}
