package io.ostinato.worker;

import java.io.IOException;
import java.net.InetAddress;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
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

    private final ClusterInfo cluster;
    private final String taskQueue;
    private final String identity;
    private final int maxConcurrent;
    private final Duration shutdownTimeout;
    private final Properties kafka;
    private final JsonPayloadConverter converter;
    private final Map<String, Activity> activities = new LinkedHashMap<>();
    private final Codec codec = new Codec(Schemas.get());
    private TaskPoller poller;
    private Thread thread;
    private boolean closed;

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
        if (thread != null) {
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
        if (thread != null) {
            return;
        }
        if (closed) {
            throw new IllegalStateException("the worker is closed");
        }
        if (activities.isEmpty()) {
            throw new IllegalStateException("register at least one activity before starting the worker");
        }
        KafkaSettings settings = new KafkaSettings(cluster, identity, kafka);
        if (!settings.securityProtocol().equalsIgnoreCase(cluster.kafkaSecurityProtocol())) {
            // The server never hands out credentials: each worker brings its own (docs/security.md).
            LOG.log(System.Logger.Level.WARNING, "the server reaches Kafka with security.protocol="
                    + cluster.kafkaSecurityProtocol() + " but this worker with " + settings.securityProtocol()
                    + ": set kafkaProperty(\"security.protocol\", ...) and this worker's credentials");
        }
        new TaskTopics(cluster, kafka).ensure(taskQueue);
        KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(settings.producer(), new ByteArraySerializer(), new ByteArraySerializer());
        int replyPartition = ThreadLocalRandom.current().nextInt(cluster.replyPartitions());
        ReplyReader replies = new ReplyReader(settings.base(), cluster.repliesTopic(), replyPartition, codec);
        replies.start();
        Engine engine = new Engine(producer, replies, codec, cluster, replyPartition, identity);
        ScheduledExecutorService timers = new ScheduledThreadPoolExecutor(1, daemon("ostinato-heartbeats"));
        ExecutorService pool = new ThreadPoolExecutor(maxConcurrent, maxConcurrent, 60, TimeUnit.SECONDS,
                new LinkedBlockingQueue<>(), daemon("ostinato-activity"));
        ActivityRunner runner = new ActivityRunner(Map.copyOf(activities), converter, engine, timers, identity);
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(settings.consumer(taskQueue),
                new ByteArrayDeserializer(), new ByteArrayDeserializer());
        poller = new TaskPoller(consumer, producer, replies, engine, runner, pool, timers, codec, maxConcurrent,
                shutdownTimeout, identity);
        String topic = cluster.taskTopic(taskQueue, "activity");
        consumer.subscribe(List.of(topic), poller.rebalanceListener());
        thread = new Thread(poller, "ostinato-worker-" + taskQueue);
        thread.start();
        LOG.log(System.Logger.Level.INFO, "worker " + identity + " serving " + topic + " ("
                + String.join(", ", activityTypes()) + ")");
    }

    /** Start (unless started) and serve until {@link #close()} is called, e.g. from a shutdown hook. */
    public void run() throws InterruptedException {
        start();
        Thread serving;
        synchronized (this) {
            serving = thread;
        }
        serving.join();
    }

    /**
     * Stop taking tasks, finish starting the ones taken, ask running attempts to stop (each answers a retryable
     * WorkerShutdown failure at its next heartbeat, or finishes), commit, and close the Kafka clients.
     */
    @Override
    public void close() throws InterruptedException {
        Thread serving;
        synchronized (this) {
            closed = true;
            serving = thread;
            if (poller != null) {
                poller.stop();
            }
        }
        if (serving != null && serving != Thread.currentThread()) {
            serving.join();
        }
    }

    private static ThreadFactory daemon(String prefix) {
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
