package io.ostinato.worker;

import java.io.IOException;
import java.net.InetAddress;
import java.time.Duration;
import java.time.Instant;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * An Ostinato activity worker: serves the activities registered on it from one task queue, speaking the same
 * Kafka protocol as the Python worker (schemas/README.md, "An activity worker in any language").
 *
 * <ul>
 *   <li>joins the queue's consumer group ({@code <prefix>-worker-<queue>}, cooperative-sticky, read_committed),
 *       so Java and Python workers of one queue share its partitions;</li>
 *   <li>reports RecordActivityTaskStarted and waits for its reply before the task's offset may be committed:
 *       a task is never lost between Kafka and a worker, and from then on the engine's timeouts protect it;</li>
 *   <li>answers on the workflow's shard of the commands topic (Kafka's Java partitioner, passed explicitly);</li>
 *   <li>pauses its partitions while {@code maxConcurrentActivities} attempts run or start (backpressure);</li>
 *   <li>on {@link #close()}, stops taking tasks and hands running attempts back: each answers a retryable
 *       {@code WorkerShutdown} failure at its next heartbeat, so another worker retries it at once.</li>
 * </ul>
 *
 * <pre>{@code
 * try (ActivityWorker worker = ActivityWorker.newBuilder("http://127.0.0.1:7243", "payments").build()) {
 *     worker.register("charge", Charge.class, (ctx, charge) -> gateway.charge(charge));
 *     worker.run();
 * }
 * }</pre>
 */
public final class ActivityWorker implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("ostinato.worker");
    static final Duration REPLY_TIMEOUT = Duration.ofSeconds(30);
    static final Duration POLL = Duration.ofMillis(50);
    /** Finished tasks' offsets are committed at most this often; a crash re-reads at most that much more. */
    static final long COMMIT_INTERVAL_NANOS = TimeUnit.MILLISECONDS.toNanos(100);
    /** Records carry payloads up to the claim-check threshold plus envelopes (schemas/topics.py). */
    static final int MAX_RECORD_BYTES = 4 * 1024 * 1024;

    private final ClusterInfo cluster;
    private final String taskQueue;
    private final String identity;
    private final int maxConcurrent;
    private final Duration shutdownTimeout;
    private final Properties kafka;
    private final JsonPayloadConverter converter;
    private final Map<String, Activity> activities = new LinkedHashMap<>();
    private final Codec codec = new Codec(Schemas.get());

    private final OffsetTracker offsets = new OffsetTracker();
    private final ConcurrentLinkedQueue<ConsumerRecord<byte[], byte[]>> done = new ConcurrentLinkedQueue<>();
    private final Set<CompletableFuture<?>> starts = ConcurrentHashMap.newKeySet();
    private final Set<Attempt> attempts = ConcurrentHashMap.newKeySet();
    private final AtomicInteger starting = new AtomicInteger();
    private final AtomicInteger running = new AtomicInteger();
    private volatile boolean stopping;
    private long committedAt;

    private Thread poller;
    private KafkaConsumer<byte[], byte[]> consumer;
    private KafkaProducer<byte[], byte[]> producer;
    private ReplyReader replies;
    private ExecutorService pool;
    private ScheduledExecutorService timers;
    private Engine engine;
    private ActivityRunner runner;
    private String activityTopic;

    private ActivityWorker(Builder b) {
        this.cluster = b.cluster;
        this.taskQueue = b.taskQueue;
        this.identity = b.identity;
        this.maxConcurrent = b.maxConcurrentActivities;
        this.shutdownTimeout = b.shutdownTimeout;
        this.kafka = b.kafka;
        this.converter = b.converter;
    }

    /**
     * A worker for {@code taskQueue} of the cluster served at {@code serverUrl}: its Kafka bootstrap, topic
     * prefix and shard count come from the server's {@code GET /api/v1/cluster} when the worker is built.
     */
    public static Builder newBuilder(String serverUrl, String taskQueue) {
        return new Builder(serverUrl, taskQueue);
    }

    /** Serve {@code type} with {@code activity}; its arguments are read through {@link ActivityInput}. */
    public synchronized ActivityWorker register(String type, Activity activity) {
        if (poller != null) {
            throw new IllegalStateException("register activities before the worker starts");
        }
        if (activities.putIfAbsent(type, activity) != null) {
            throw new IllegalArgumentException("two activities are named " + type);
        }
        return this;
    }

    /** Serve {@code type} with an activity of one argument, decoded as {@code inputType}. */
    public <T> ActivityWorker register(String type, Class<T> inputType, TypedActivity<T> activity) {
        return register(type, (ctx, input) -> {
            T value;
            try {
                value = input.get(0, inputType);
            } catch (PayloadConversionException e) {
                throw ApplicationFailure.newFailure("cannot decode the input of activity " + type + ": "
                        + e.getMessage(), "PayloadConversionError").withCause(e);
            }
            return activity.execute(ctx, value);
        });
    }

    /** Serve every {@link ActivityMethod} of {@code implementation}. */
    public ActivityWorker registerActivities(Object implementation) {
        AnnotatedActivities.of(implementation).forEach(this::register);
        return this;
    }

    /** The registered activity types, sorted. */
    public synchronized Set<String> activityTypes() {
        return new TreeSet<>(activities.keySet());
    }

    public ClusterInfo cluster() {
        return cluster;
    }

    public String identity() {
        return identity;
    }

    /** Connect and start serving on a thread of the worker's own; returns once subscribed. */
    public synchronized void start() {
        if (poller != null) {
            return;
        }
        if (activities.isEmpty()) {
            throw new IllegalStateException("register at least one activity before starting the worker");
        }
        activityTopic = cluster.taskTopic(taskQueue, "activity");
        String protocol = kafka.getProperty("security.protocol", "PLAINTEXT");
        if (!protocol.equalsIgnoreCase(cluster.kafkaSecurityProtocol())) {
            // The server never hands out credentials: each worker brings its own (docs/security.md).
            LOG.log(System.Logger.Level.WARNING, "the server reaches Kafka with security.protocol="
                    + cluster.kafkaSecurityProtocol() + " but this worker with " + protocol
                    + ": set kafkaProperty(\"security.protocol\", ...) and this worker's credentials");
        }
        new TaskTopics(cluster, kafka).ensure(taskQueue);
        producer = new KafkaProducer<>(producerConfig(), new ByteArraySerializer(), new ByteArraySerializer());
        int replyPartition = ThreadLocalRandom.current().nextInt(cluster.replyPartitions());
        replies = new ReplyReader(base(), cluster.repliesTopic(), replyPartition, codec);
        replies.start();
        engine = new Engine(producer, replies, codec, cluster, replyPartition, identity);
        timers = new ScheduledThreadPoolExecutor(1, daemon("ostinato-heartbeats"));
        pool = new ThreadPoolExecutor(maxConcurrent, maxConcurrent, 60, TimeUnit.SECONDS,
                new LinkedBlockingQueue<>(), daemon("ostinato-activity"));
        runner = new ActivityRunner(Map.copyOf(activities), converter, engine, timers, identity);
        consumer = new KafkaConsumer<>(consumerConfig(), new ByteArrayDeserializer(), new ByteArrayDeserializer());
        consumer.subscribe(List.of(activityTopic), new Rebalance());
        poller = new Thread(this::pollLoop, "ostinato-worker-" + taskQueue);
        poller.start();
        LOG.log(System.Logger.Level.INFO, "worker " + identity + " serving " + activityTopic + " ("
                + String.join(", ", activityTypes()) + ")");
    }

    /** Start (unless started) and serve until {@link #close()} is called, e.g. from a shutdown hook. */
    public void run() throws InterruptedException {
        start();
        poller.join();
    }

    /**
     * Stop taking tasks, finish starting the ones taken, ask running attempts to stop (each answers a retryable
     * WorkerShutdown failure at its next heartbeat, or finishes), commit, and close the Kafka clients.
     */
    @Override
    public void close() throws InterruptedException {
        stopping = true;
        Thread thread;
        synchronized (this) {
            thread = poller;
        }
        if (thread != null && thread != Thread.currentThread()) {
            thread.join();
        }
    }

    // -- the poll thread -----------------------------------------------------------------------------------------

    private void pollLoop() {
        try {
            while (!stopping) {
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(POLL)) {
                    offsets.begin(new TopicPartition(record.topic(), record.partition()), record.offset());
                    take(record);
                }
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

    /** Commit what finished on revoked partitions, then forget them: their next owner goes on from there. */
    private final class Rebalance implements ConsumerRebalanceListener {
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
    }

    // -- Kafka settings ------------------------------------------------------------------------------------------

    private Properties base() {
        Properties props = new Properties();
        props.put("bootstrap.servers", cluster.kafkaBootstrap());
        props.put("client.id", identity);
        props.putAll(kafka);  // the worker's own security settings and overrides
        return props;
    }

    private Properties consumerConfig() {
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
        props.putAll(kafka);
        return props;
    }

    private Properties producerConfig() {
        Properties props = base();
        props.put("enable.idempotence", "true");
        props.put("acks", "all");
        props.put("linger.ms", "0");
        props.put("max.request.size", String.valueOf(MAX_RECORD_BYTES));
        props.putAll(kafka);
        return props;
    }

    private static java.util.concurrent.ThreadFactory daemon(String prefix) {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, prefix + "-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }

    /** How a worker is made: the server to ask for the cluster, the queue, and optional settings. */
    public static final class Builder {
        private final String serverUrl;
        private final String taskQueue;
        private ClusterInfo cluster;
        private String identity;
        private int maxConcurrentActivities = 100;
        private Duration shutdownTimeout = Duration.ofSeconds(30);
        private final Properties kafka = new Properties();
        private JsonPayloadConverter converter = new JsonPayloadConverter();

        private Builder(String serverUrl, String taskQueue) {
            this.serverUrl = serverUrl;
            this.taskQueue = taskQueue;
        }

        /** Who answers, as history records it; default {@code <pid>@<host>}. */
        public Builder identity(String identity) {
            this.identity = identity;
            return this;
        }

        /** Attempts that run (or start) at once; the rest wait in Kafka. Default 100. */
        public Builder maxConcurrentActivities(int max) {
            if (max < 1) {
                throw new IllegalArgumentException("maxConcurrentActivities must be at least 1, not " + max);
            }
            this.maxConcurrentActivities = max;
            return this;
        }

        /** How long {@link ActivityWorker#close()} waits for running attempts to stop. Default 30 s. */
        public Builder shutdownTimeout(Duration timeout) {
            this.shutdownTimeout = timeout;
            return this;
        }

        /** A Kafka client property for every client of the worker (security settings, credentials, overrides). */
        public Builder kafkaProperty(String name, String value) {
            kafka.put(name, value);
            return this;
        }

        public Builder converter(JsonPayloadConverter converter) {
            this.converter = converter;
            return this;
        }

        /** Use these cluster settings instead of asking the server (tests, or a worker without HTTP access). */
        public Builder cluster(ClusterInfo cluster) {
            this.cluster = cluster;
            return this;
        }

        public ActivityWorker build() throws IOException, InterruptedException {
            if (cluster == null) {
                cluster = ClusterInfo.fetch(serverUrl);
            }
            if (identity == null) {
                identity = ProcessHandle.current().pid() + "@" + InetAddress.getLocalHost().getHostName();
            }
            return new ActivityWorker(this);
        }
    }
}
