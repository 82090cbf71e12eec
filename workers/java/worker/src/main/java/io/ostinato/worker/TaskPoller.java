package io.ostinato.worker;

import java.time.Duration;
import java.time.Instant;
import java.util.Collection;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;

/**
 * The worker's poll thread: takes activity tasks from Kafka, reports each started, hands accepted ones to the
 * activity threads, commits offsets up to the first task not yet done, pauses while the worker is full, and on
 * stop drains and closes every client. It alone touches the consumer (which is not thread-safe).
 */
final class TaskPoller implements Runnable {
    private static final System.Logger LOG = System.getLogger("ostinato.worker");
    static final Duration REPLY_TIMEOUT = Duration.ofSeconds(30);
    static final Duration POLL = Duration.ofMillis(50);
    /** Finished tasks' offsets are committed at most this often; a crash re-reads at most that much more. */
    static final long COMMIT_INTERVAL_NANOS = TimeUnit.MILLISECONDS.toNanos(100);

    private final KafkaConsumer<byte[], byte[]> consumer;
    private final KafkaProducer<byte[], byte[]> producer;
    private final ReplyReader replies;
    private final Engine engine;
    private final ActivityRunner runner;
    private final ExecutorService pool;
    private final ScheduledExecutorService timers;
    private final Codec codec;
    private final int maxConcurrent;
    private final Duration shutdownTimeout;
    private final String identity;

    private final OffsetTracker offsets = new OffsetTracker();
    private final ConcurrentLinkedQueue<ConsumerRecord<byte[], byte[]>> done = new ConcurrentLinkedQueue<>();
    private final Set<CompletableFuture<?>> starts = ConcurrentHashMap.newKeySet();
    private final Set<Attempt> attempts = ConcurrentHashMap.newKeySet();
    private final AtomicInteger starting = new AtomicInteger();
    private final AtomicInteger running = new AtomicInteger();
    private volatile boolean stopping;
    private long committedAt;

    TaskPoller(KafkaConsumer<byte[], byte[]> consumer, KafkaProducer<byte[], byte[]> producer, ReplyReader replies,
               Engine engine, ActivityRunner runner, ExecutorService pool, ScheduledExecutorService timers,
               Codec codec, int maxConcurrent, Duration shutdownTimeout, String identity) {
        this.consumer = consumer;
        this.producer = producer;
        this.replies = replies;
        this.engine = engine;
        this.runner = runner;
        this.pool = pool;
        this.timers = timers;
        this.codec = codec;
        this.maxConcurrent = maxConcurrent;
        this.shutdownTimeout = shutdownTimeout;
        this.identity = identity;
    }

    /** Ask the thread to drain and stop; it closes the clients on its way out. */
    void stop() {
        stopping = true;
    }

    /** Commits what finished on revoked partitions, then forgets them: their next owner goes on from there. */
    ConsumerRebalanceListener rebalanceListener() {
        return new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                commitDone(true);
                offsets.forget(partitions);
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> partitions) {
                offsets.forget(partitions);
            }
        };
    }

    @Override
    public void run() {
        try {
            while (!stopping) {
                takeWhileFree(consumer.poll(POLL));
                commitDone(false);
                backpressure();
            }
            drain();
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.ERROR, "worker " + identity + " stopped: " + Failures.describe(e));
        } finally {
            closeClients();
        }
    }

    /**
     * Take tasks while the worker has free slots; a partition whose next task does not fit is rewound to it, so
     * what the worker cannot run now stays in Kafka (for this worker once a slot frees, or for the partition's
     * next owner) instead of being started here and waiting for a thread while its timeout runs.
     */
    private void takeWhileFree(ConsumerRecords<byte[], byte[]> records) {
        Set<TopicPartition> rewound = new HashSet<>();
        for (ConsumerRecord<byte[], byte[]> record : records) {
            TopicPartition tp = new TopicPartition(record.topic(), record.partition());
            if (rewound.contains(tp)) {
                continue;
            }
            if (running.get() + starting.get() >= maxConcurrent) {
                consumer.seek(tp, record.offset());
                rewound.add(tp);
                continue;
            }
            offsets.begin(tp, record.offset());
            take(record);
        }
    }

    /** Report the attempt started; run it once the engine accepted, and let its offset go either way. */
    private void take(ConsumerRecord<byte[], byte[]> record) {
        GenericRecord task;
        try {
            task = codec.decode("ostinato.task.ActivityTask", record.value());
        } catch (WireException e) {
            LOG.log(System.Logger.Level.ERROR, "skipping an unreadable task at " + record.topic() + "["
                    + record.partition() + "]@" + record.offset() + ": " + e.getMessage());
            done.add(record);
            return;
        }
        starting.incrementAndGet();
        long asked = System.nanoTime();
        CompletableFuture<?> start = engine.request(task, Engine.body("RecordActivityTaskStarted", task).build(),
                        REPLY_TIMEOUT)
                .handle((reply, err) -> {
                    try {
                        if (err == null && reply.isPresent() && Engine.accepted(reply.get())
                                && !ActivityRunner.tooLate(task, System.nanoTime() - asked)) {
                            running.incrementAndGet();
                            pool.execute(() -> runAttempt(task));
                        } else if (err != null || reply.isEmpty()) {
                            LOG.log(System.Logger.Level.WARNING, "activity " + task.get("activity_id") + " of "
                                    + task.get("workflow_id") + " not run: " + (err != null ? err
                                    : "no answer to RecordActivityTaskStarted in " + REPLY_TIMEOUT)
                                    + "; the engine's timeout retries it");
                        }
                    } finally {
                        starting.decrementAndGet();
                        done.add(record);  // from here on the engine's timeouts protect the task
                    }
                    return null;
                });
        starts.add(start);
        start.whenComplete((v, e) -> starts.remove(start));
    }

    private void runAttempt(GenericRecord task) {
        try {
            runner.run(task, Instant.now(), attempts);
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.ERROR, "running activity " + task.get("activity_id") + " failed; the "
                    + "engine's timeout retries it: " + Failures.describe(e));
        } finally {
            running.decrementAndGet();
        }
    }

    private void commitDone(boolean sync) {
        for (ConsumerRecord<byte[], byte[]> record; (record = done.poll()) != null; ) {
            offsets.done(new TopicPartition(record.topic(), record.partition()), record.offset());
        }
        long now = System.nanoTime();
        if (!sync && now - committedAt < COMMIT_INTERVAL_NANOS) {
            return;
        }
        committedAt = now;
        Map<TopicPartition, OffsetAndMetadata> upto = offsets.committable();
        if (upto.isEmpty()) {
            return;
        }
        try {
            if (sync) {
                consumer.commitSync(upto);
            } else {
                consumer.commitAsync(upto, (o, err) -> {
                    if (err != null) {  // e.g. revoked meanwhile: its next owner re-reads from before
                        LOG.log(System.Logger.Level.WARNING, "commit of " + o.size() + " offsets failed: " + err);
                    }
                });
            }
        } catch (KafkaException e) {
            LOG.log(System.Logger.Level.WARNING, "commit of " + upto.size() + " offsets failed: " + e);
        }
    }

    /** Pause every partition while the worker is full, so tasks wait in Kafka (where any worker can take them). */
    private void backpressure() {
        boolean full = running.get() + starting.get() >= maxConcurrent;
        if (full) {
            consumer.pause(consumer.assignment());
        } else if (!consumer.paused().isEmpty()) {
            consumer.resume(consumer.paused());
        }
    }

    private void drain() {
        LOG.log(System.Logger.Level.INFO, "worker " + identity + " shutting down: " + running.get()
                + " activities running, " + starts.size() + " starting");
        waitFor(CompletableFuture.allOf(starts.toArray(new CompletableFuture<?>[0])), REPLY_TIMEOUT);
        attempts.forEach(a -> a.requestStop(Attempt.StopReason.WORKER_SHUTDOWN));
        pool.shutdown();
        try {
            if (!pool.awaitTermination(shutdownTimeout.toMillis(), TimeUnit.MILLISECONDS)) {
                LOG.log(System.Logger.Level.WARNING, running.get() + " activities did not stop within "
                        + shutdownTimeout + "; the engine's timeouts retry them");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        producer.flush();
        commitDone(true);
    }

    private void closeClients() {
        try {
            if (pool != null) {
                pool.shutdownNow();
            }
            if (timers != null) {
                timers.shutdownNow();
            }
            consumer.close(Duration.ofSeconds(10));
            producer.close(Duration.ofSeconds(10));
            replies.close();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.WARNING, "closing the Kafka clients: " + e);
        }
    }

    private static void waitFor(CompletableFuture<?> future, Duration timeout) {
        try {
            future.get(timeout.toMillis(), TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            LOG.log(System.Logger.Level.WARNING, "gave up waiting after " + timeout + ": " + e);
        }
    }
}
