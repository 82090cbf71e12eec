package io.ostinato.worker;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Reads this worker's partition of {@code <prefix>.replies} (manually assigned, read_committed, from its end) on
 * a thread of its own and completes the futures waiting for each request id. Other readers of the same
 * partition are harmless: each completes only what it waits for.
 */
final class ReplyReader implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("ostinato.worker.replies");

    private final KafkaConsumer<String, byte[]> consumer;
    private final TopicPartition partition;
    private final Codec codec;
    private final Map<String, CompletableFuture<org.apache.avro.generic.GenericRecord>> waiting =
            new ConcurrentHashMap<>();
    private final Thread thread;
    private volatile boolean closed;

    ReplyReader(Properties base, String topic, int partition, Codec codec) {
        Properties props = new Properties();
        props.putAll(base);
        props.put("isolation.level", "read_committed");
        props.put("enable.auto.commit", "false");
        props.put("fetch.max.wait.ms", "10");  // someone waits for every answer: fetch again soon
        props.put("allow.auto.create.topics", "false");
        this.consumer = new KafkaConsumer<>(props, new org.apache.kafka.common.serialization.StringDeserializer(),
                new ByteArrayDeserializer());
        this.partition = new TopicPartition(topic, partition);
        this.codec = codec;
        this.thread = new Thread(this::run, "ostinato-replies-" + partition);
        this.thread.setDaemon(true);
    }

    /**
     * Position at the partition's end before returning: a reply to a request made after this cannot be missed.
     */
    void start() {
        consumer.assign(List.of(partition));
        consumer.seekToEnd(List.of(partition));
        consumer.position(partition, Duration.ofSeconds(30));
        thread.start();
    }

    /** Register before producing the command: the answer may be back before the send returns. */
    CompletableFuture<org.apache.avro.generic.GenericRecord> expect(String requestId) {
        CompletableFuture<org.apache.avro.generic.GenericRecord> future = new CompletableFuture<>();
        waiting.put(requestId, future);
        return future;
    }

    void forget(String requestId) {
        waiting.remove(requestId);
    }

    private void run() {
        try {
            while (!closed) {
                for (ConsumerRecord<String, byte[]> record : consumer.poll(Duration.ofMillis(100))) {
                    CompletableFuture<org.apache.avro.generic.GenericRecord> future =
                            record.key() == null ? null : waiting.remove(record.key());
                    if (future == null) {
                        continue;
                    }
                    try {
                        future.complete(codec.decode("ostinato.reply.Reply", record.value()));
                    } catch (WireException e) {
                        future.completeExceptionally(e);
                    }
                }
            }
        } catch (WakeupException e) {
            if (!closed) {
                throw e;
            }
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.ERROR, "the replies reader stopped: " + Failures.describe(e));
        } finally {
            consumer.close(Duration.ofSeconds(5));
        }
    }

    @Override
    public void close() throws InterruptedException {
        closed = true;
        consumer.wakeup();
        thread.join(10_000);
        waiting.values().forEach(f -> f.cancel(false));
    }
}
