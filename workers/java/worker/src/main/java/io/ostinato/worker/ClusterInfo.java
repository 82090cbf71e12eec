package io.ostinato.worker;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

/**
 * What a worker needs to find its topics, from the server's {@code GET /api/v1/cluster}: the same answer the
 * Python worker reads, so both kinds of worker always agree on bootstrap, prefix and shard count.
 *
 * @param kafkaSecurityProtocol the protocol the server uses ({@code PLAINTEXT} when none was given); credentials
 *     never travel here, each worker brings its own Kafka properties
 */
public record ClusterInfo(String kafkaBootstrap, String topicPrefix, int shards, int replicationFactor,
                          int replyPartitions, String kafkaSecurityProtocol) {

    /** Ask the server at {@code serverUrl} (e.g. {@code http://127.0.0.1:7243}). */
    public static ClusterInfo fetch(String serverUrl) throws IOException, InterruptedException {
        URI uri = URI.create(serverUrl.replaceAll("/+$", "") + "/api/v1/cluster");
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
        HttpResponse<String> response = http.send(
                HttpRequest.newBuilder(uri).timeout(Duration.ofSeconds(30)).header("Accept", "application/json")
                        .build(),
                HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() != 200) {
            throw new IOException("GET " + uri + " answered " + response.statusCode() + ": " + response.body());
        }
        return parse(response.body());
    }

    static ClusterInfo parse(String json) throws IOException {
        JsonNode body = new ObjectMapper().readTree(json);
        JsonNode security = body.path("kafka_security");
        return new ClusterInfo(
                required(body, "kafka_bootstrap").asText(),
                required(body, "topic_prefix").asText(),
                required(body, "shards").asInt(),
                body.path("replication_factor").asInt(1),
                required(body, "reply_partitions").asInt(),
                security.path("security.protocol").asText("PLAINTEXT"));
    }

    private static JsonNode required(JsonNode body, String field) throws IOException {
        JsonNode value = body.get(field);
        if (value == null || value.isNull()) {
            throw new IOException("the cluster endpoint's answer has no " + field + ": " + body);
        }
        return value;
    }

    String commandsTopic() {
        return topicPrefix + ".commands";
    }

    String repliesTopic() {
        return topicPrefix + ".replies";
    }

    /** {@code <prefix>.tasks.<queue>.<kind>} (schemas/topics.py task_topic_name). */
    String taskTopic(String queue, String kind) {
        return topicPrefix + ".tasks." + queue + "." + kind;
    }

    /** The consumer group of a queue's workers, shared with the Python workers of that queue. */
    String workerGroup(String queue) {
        return topicPrefix + "-worker-" + queue;
    }
}
