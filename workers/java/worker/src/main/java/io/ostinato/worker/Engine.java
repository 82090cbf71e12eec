package io.ostinato.worker;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * Talks to the engine the way schemas/README.md describes it: a {@code Command} addressed to the task's run, on
 * the workflow's shard of {@code <prefix>.commands}; answers, when asked for, on this worker's replies partition.
 */
final class Engine {
    private static final System.Logger LOG = System.getLogger("ostinato.worker");
    static final String PREFIX = "ostinato.command.";

    private final Producer<byte[], byte[]> producer;
    private final ReplyReader replies;
    private final Codec codec;
    private final ClusterInfo cluster;
    private final int replyPartition;
    private final String identity;
    private final Schema commandSchema = Schemas.get().schema(PREFIX + "Command");

    Engine(Producer<byte[], byte[]> producer, ReplyReader replies, Codec codec, ClusterInfo cluster,
           int replyPartition, String identity) {
        this.producer = producer;
        this.replies = replies;
        this.codec = codec;
        this.cluster = cluster;
        this.replyPartition = replyPartition;
        this.identity = identity;
    }

    /** A command body such as {@code RecordActivityTaskStarted}, with the fields every task answer carries. */
    static GenericRecordBuilder body(String command, GenericRecord task) {
        return new GenericRecordBuilder(Schemas.get().schema(PREFIX + command))
                .set("scheduled_event_id", task.get("scheduled_event_id"))
                .set("attempt", task.get("attempt"));
    }

    /** Send without waiting for the engine's answer (a completion: answering twice is harmless). */
    void send(GenericRecord task, GenericRecord body, Callback onDelivery) {
        produce(task, body, null, UUID.randomUUID().toString(), onDelivery);
    }

    /**
     * Send and wait up to {@code timeout} for the owner's {@code Reply}; empty when none came in time (the
     * engine's timeouts cover a lost answer).
     */
    CompletableFuture<Optional<GenericRecord>> request(GenericRecord task, GenericRecord body, Duration timeout) {
        String requestId = UUID.randomUUID().toString();
        CompletableFuture<GenericRecord> answer = replies.expect(requestId);
        try {
            produce(task, body, replyPartition, requestId, (meta, err) -> {
                if (err != null) {
                    answer.completeExceptionally(err);
                }
            });
        } catch (RuntimeException e) {
            replies.forget(requestId);
            return CompletableFuture.failedFuture(e);
        }
        return answer.orTimeout(timeout.toMillis(), TimeUnit.MILLISECONDS)
                .handle((reply, err) -> {
                    replies.forget(requestId);
                    if (err != null) {
                        LOG.log(System.Logger.Level.DEBUG, "no reply to " + body.getSchema().getName() + " for "
                                + task.get("workflow_id") + ": " + err);
                        return Optional.empty();
                    }
                    return Optional.of(reply);
                });
    }

    private void produce(GenericRecord task, GenericRecord body, Integer replyPartition, String requestId,
                         Callback onDelivery) {
        String namespace = task.get("namespace").toString();
        String workflowId = task.get("workflow_id").toString();
        GenericRecord command = new GenericRecordBuilder(commandSchema)
                .set("namespace", namespace)
                .set("workflow_id", workflowId)
                .set("run_id", task.get("run_id").toString())
                .set("request_id", requestId)
                .set("identity", identity)
                .set("time_ms", System.currentTimeMillis())
                .set("reply_partition", replyPartition)
                .set("body", body)
                .build();
        String key = Keys.workflowKey(namespace, workflowId);
        producer.send(new ProducerRecord<>(cluster.commandsTopic(), Keys.partitionFor(key, cluster.shards()),
                key.getBytes(StandardCharsets.UTF_8), codec.encode(command)), onDelivery);
    }

    /** Whether a reply is an {@code Accepted}; a {@code Rejected} (stale task, closed run) means stop. */
    static boolean accepted(GenericRecord reply) {
        return bodyName(reply).equals("ostinato.reply.Accepted");
    }

    /** Whether a heartbeat's reply tells the activity to stop (cancel requested, or the attempt is stale). */
    static boolean stopRequested(GenericRecord reply) {
        if (!accepted(reply)) {
            return true;
        }
        return Boolean.TRUE.equals(((GenericRecord) reply.get("body")).get("cancel_requested"));
    }

    static String bodyName(GenericRecord reply) {
        return ((GenericRecord) reply.get("body")).getSchema().getFullName();
    }
}
