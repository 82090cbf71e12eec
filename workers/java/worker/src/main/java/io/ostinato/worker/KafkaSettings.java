package io.ostinato.worker;

import java.util.Properties;

/**
 * The Kafka client settings of a worker: the Python worker's (sdk/_kafka_worker.py) in Java's names, with the
 * user's own properties (security, credentials, overrides) applied last.
 */
final class KafkaSettings {
    /** Records carry payloads up to the claim-check threshold plus envelopes (schemas/topics.py). */
    static final int MAX_RECORD_BYTES = 4 * 1024 * 1024;

    private final ClusterInfo cluster;
    private final String identity;
    private final Properties user;

    KafkaSettings(ClusterInfo cluster, String identity, Properties user) {
        this.cluster = cluster;
        this.identity = identity;
        this.user = user;
    }

    Properties base() {
        Properties props = new Properties();
        props.put("bootstrap.servers", cluster.kafkaBootstrap());
        props.put("client.id", identity);
        props.putAll(user);
        return props;
    }

    Properties consumer(String taskQueue) {
        Properties props = base();
        props.put("group.id", cluster.workerGroup(taskQueue));
        props.put("enable.auto.commit", "false");
        props.put("isolation.level", "read_committed");
        props.put("auto.offset.reset", "earliest");
        // The Python workers of the queue use librdkafka's cooperative-sticky: one group needs one protocol.
        props.put("partition.assignment.strategy", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");
        // A dead worker's partitions move on after 10 s, as with the Python worker (the default strands 45 s).
        props.put("session.timeout.ms", "10000");
        props.put("heartbeat.interval.ms", "2000");
        props.put("fetch.max.wait.ms", "20");
        props.put("max.poll.records", "100");
        props.put("fetch.max.bytes", String.valueOf(MAX_RECORD_BYTES * 2));
        props.put("allow.auto.create.topics", "false");  // task topics carry configs only TaskTopics sets
        props.putAll(user);
        return props;
    }

    Properties producer() {
        Properties props = base();
        props.put("enable.idempotence", "true");
        props.put("acks", "all");
        props.put("linger.ms", "0");
        props.put("max.request.size", String.valueOf(MAX_RECORD_BYTES));
        props.putAll(user);
        return props;
    }

    /** The security protocol this worker uses (what it was given, else PLAINTEXT). */
    String securityProtocol() {
        return user.getProperty("security.protocol", "PLAINTEXT");
    }
}
