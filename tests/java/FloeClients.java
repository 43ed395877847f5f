// The unmodified Apache Kafka Java client (kafka-clients 3.9.1) driven from the tests.
//
// One file, no build tool: tests/helpers/java.py compiles it with javac against the
// kafka-clients jar and runs `java FloeClients <subcommand> <args...>`.
//
// Output contract (stdout, one line per event, flushed at once, fields split by spaces;
// values never contain spaces):
//   ACK <partition> <offset> <value>    a produced value acknowledged by the broker
//   ERR <value> <exception>             a produced value that failed (or `commit`)
//   GOT <partition> <offset> <value>    a consumed value
//   ASSIGNED <p,p,...> / REVOKED <...>  group rebalances of a consumer (`-` for none)
//   PARTITION / LISTED / EXISTS / NODE / CLUSTER   admin results
//   HANGING <producer id> <epoch> <start offset>     a transaction `abort-hanging` aborted
//   OPS <cluster|topic|group> <OP,OP,...>  the authorized operations a describe returned
//                                       (`null`: none returned; `-`: an empty set)
//   DENIED <call> <exception>           a describe the broker refused
//   REASSIGN <partition> <replicas|cancel> <OK|exception>   one step of `reassign`
//   ONGOING <partition> <replicas> <adding> <removing>     a reassignment in progress
//   REASSIGNING <count> / SETTLED <topic>                 after `list` / `settled`
//   ABORTED <count> / COMMITTED <count> the transactions of `txn`
//   DONE <key>=<value> ...              the last line of a run that finished
// Exit code 0 on success; otherwise non-zero with the reason on stderr, where the
// client's own WARN and ERROR log lines also go (StaticLoggerBinder.java).
// The long-running subcommands (stream-*) stop when stdin says `stop` or closes, so a
// test that dies takes its JVMs with it.

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** Kafka client workloads whose results the Python tests read from stdout. */
public final class FloeClients {
    private static final PrintStream OUT =
            new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
    private static final long ADMIN_TIMEOUT_S = 30;
    /** Pacing of stream-produce: at most this many sends waiting for their ack... */
    private static final int STREAM_MAX_UNACKED = 100;
    /** ...and a pause after each send, as the Python clients' streams make (unpaced, one
     *  JVM sends ~30 times as many records and starves the brokers of CPU). */
    private static final long STREAM_PAUSE_MS = 20;
    private static final Duration POLL = Duration.ofMillis(200);

    /** A failure the caller should see as a message on stderr and a non-zero exit. */
    private static final class Failure extends Exception {
        private static final long serialVersionUID = 1L;

        Failure(String message) {
            super(message);
        }
    }

    private FloeClients() {}

    public static void main(String[] args) {
        silenceSlf4jBindingWarning();
        if (args.length == 0) {
            System.err.println("usage: FloeClients <subcommand> <args...>");
            System.exit(2);
        }
        try {
            run(args[0], args);
            System.exit(0);
        } catch (Failure e) {
            System.err.println("FloeClients " + args[0] + ": " + e.getMessage());
        } catch (Exception e) {
            System.err.println("FloeClients " + args[0] + " failed:");
            e.printStackTrace();
        }
        System.exit(1);
    }

    private static void run(String command, String[] a) throws Exception {
        switch (command) {
            case "admin" -> {
                need(a, 4);
                admin(a[1], a[2], Integer.parseInt(a[3]));
            }
            case "abort-hanging" -> {
                need(a, 4);
                abortHanging(a[1], a[2], Integer.parseInt(a[3]));
            }
            case "authorized" -> {
                need(a, 6);
                authorized(a[1], a[2], a[3], a[4], a[5]);
            }
            case "reassign" -> {
                if (a.length < 4) {
                    throw new Failure("usage: reassign <bootstrap> <topic> <step>...");
                }
                reassign(a[1], a[2], List.of(a).subList(3, a.length));
            }
            case "produce" -> {
                need(a, 5);
                produce(a[1], a[2], Integer.parseInt(a[3]), a[4]);
            }
            case "consume" -> {
                need(a, 6);
                consume(a[1], a[2], a[3], Integer.parseInt(a[4]), Long.parseLong(a[5]), "read_uncommitted");
            }
            case "read-committed" -> {
                need(a, 6);
                consume(a[1], a[2], a[3], Integer.parseInt(a[4]), Long.parseLong(a[5]), "read_committed");
            }
            case "txn" -> {
                need(a, 5);
                txn(a[1], a[2], a[3], Integer.parseInt(a[4]));
            }
            case "stream-produce" -> {
                need(a, 4);
                streamProduce(a[1], a[2], a[3]);
            }
            case "stream-consume" -> {
                need(a, 4);
                streamConsume(a[1], a[2], a[3]);
            }
            default -> throw new Failure("unknown subcommand " + command);
        }
    }

    private static void need(String[] a, int n) throws Failure {
        if (a.length != n) {
            throw new Failure("expected " + (n - 1) + " arguments, got " + (a.length - 1));
        }
    }

    /**
     * slf4j-api 1.7 without a binding logs through a no-op logger but first warns on stderr
     * that it found none; stderr is for real failures here, so the first lookup (which
     * binds, once per JVM) runs with stderr discarded.
     */
    private static void silenceSlf4jBindingWarning() {
        PrintStream err = System.err;
        System.setErr(new PrintStream(OutputStream.nullOutputStream()));
        try {
            org.slf4j.LoggerFactory.getILoggerFactory();
        } finally {
            System.setErr(err);
        }
    }

    // ------------------------------------------------------------------ admin

    /** createTopics (twice: the second must say the topic exists), describeTopics,
     *  listTopics and describeCluster, each printed. */
    private static void admin(String bootstrap, String topic, int partitions) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            List<NewTopic> create = List.of(new NewTopic(topic, partitions, (short) 1));
            admin.createTopics(create).all().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
            try {
                admin.createTopics(create).all().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
                throw new Failure("creating " + topic + " a second time succeeded");
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) {
                    throw e;
                }
                OUT.println("EXISTS " + topic);
            }
            TopicDescription description = admin.describeTopics(List.of(topic))
                    .allTopicNames().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS).get(topic);
            for (TopicPartitionInfo p : description.partitions()) {
                Node leader = p.leader();
                OUT.println("PARTITION " + p.partition() + " " + (leader == null ? -1 : leader.id())
                        + " " + p.replicas().size() + " " + p.isr().size());
            }
            Set<String> names = admin.listTopics().names().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
            for (String name : names) {
                OUT.println("LISTED " + name);
            }
            DescribeClusterResult cluster = admin.describeCluster();
            for (Node node : cluster.nodes().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS)) {
                OUT.println("NODE " + node.id() + " " + node.host() + " " + node.port());
            }
            Node controller = cluster.controller().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
            OUT.println("CLUSTER " + cluster.clusterId().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS)
                    + " " + (controller == null ? -1 : controller.id()));
            OUT.println("DONE partitions=" + description.partitions().size());
        }
    }

    /** As {@code user} on a SASL_PLAINTEXT (SCRAM-SHA-256) listener: describeCluster,
     *  then describeTopics of {@code topic} and describeConsumerGroups of {@code group}
     *  (each skipped when `-`), all asking for the authorized operations; prints the
     *  nodes, the cluster, each OPS line, and DENIED for a describe refused. */
    private static void authorized(String bootstrap, String user, String password, String topic,
            String group) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.SECURITY_PROTOCOL_CONFIG, "SASL_PLAINTEXT");
        props.put("sasl.mechanism", "SCRAM-SHA-256");
        props.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule"
                + " required username=\"" + user + "\" password=\"" + password + "\";");
        try (Admin admin = Admin.create(props)) {
            DescribeClusterResult cluster =
                    admin.describeCluster(new DescribeClusterOptions().includeAuthorizedOperations(true));
            for (Node node : cluster.nodes().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS)) {
                OUT.println("NODE " + node.id() + " " + node.host() + " " + node.port());
            }
            Node controller = cluster.controller().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
            OUT.println("CLUSTER " + cluster.clusterId().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS)
                    + " " + (controller == null ? -1 : controller.id()));
            OUT.println("OPS cluster "
                    + operations(cluster.authorizedOperations().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS)));
            if (!topic.equals("-")) {
                try {
                    TopicDescription t = admin.describeTopics(List.of(topic),
                                    new DescribeTopicsOptions().includeAuthorizedOperations(true))
                            .allTopicNames().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS).get(topic);
                    OUT.println("OPS topic " + operations(t.authorizedOperations()));
                } catch (ExecutionException e) {
                    OUT.println("DENIED topic " + e.getCause().getClass().getSimpleName());
                }
            }
            if (!group.equals("-")) {
                try {
                    ConsumerGroupDescription g = admin.describeConsumerGroups(List.of(group),
                                    new DescribeConsumerGroupsOptions().includeAuthorizedOperations(true))
                            .all().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS).get(group);
                    OUT.println("OPS group " + operations(g.authorizedOperations()));
                } catch (ExecutionException e) {
                    OUT.println("DENIED group " + e.getCause().getClass().getSimpleName());
                }
            }
            OUT.println("DONE user=" + user);
        }
    }

    /** Kafka's reassignment API on partitions of {@code topic}, one step at a time:
     *  {@code <p>=<broker>[,<broker>...]} moves partition p (alterPartitionReassignments),
     *  {@code <p>=cancel} cancels its reassignment, {@code list} prints every ongoing
     *  one (listPartitionReassignments), {@code settled} waits until none of the topic's
     *  is ongoing (up to the admin timeout). */
    private static void reassign(String bootstrap, String topic, List<String> steps) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            for (String step : steps) {
                if (step.equals("list")) {
                    printOngoing(admin);
                } else if (step.equals("settled")) {
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(ADMIN_TIMEOUT_S);
                    while (ongoing(admin, topic) > 0) {
                        if (System.nanoTime() > deadline) {
                            throw new Failure("reassignments of " + topic + " still ongoing");
                        }
                        Thread.sleep(100);
                    }
                    OUT.println("SETTLED " + topic);
                } else {
                    String[] parts = step.split("=", 2);
                    TopicPartition tp = new TopicPartition(topic, Integer.parseInt(parts[0]));
                    Optional<NewPartitionReassignment> target = parts[1].equals("cancel")
                            ? Optional.empty()
                            : Optional.of(new NewPartitionReassignment(List.of(parts[1].split(",")).stream()
                                    .map(Integer::valueOf).collect(Collectors.toList())));
                    String outcome = "OK";
                    try {
                        admin.alterPartitionReassignments(Map.of(tp, target)).all()
                                .get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
                    } catch (ExecutionException e) {
                        outcome = e.getCause().getClass().getSimpleName();
                    }
                    OUT.println("REASSIGN " + parts[0] + " " + parts[1] + " " + outcome);
                }
            }
            OUT.println("DONE steps=" + steps.size());
        }
    }

    private static int ongoing(Admin admin, String topic) throws Exception {
        return (int) admin.listPartitionReassignments().reassignments()
                .get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS).keySet().stream()
                .filter(tp -> tp.topic().equals(topic)).count();
    }

    private static void printOngoing(Admin admin) throws Exception {
        Map<TopicPartition, PartitionReassignment> found = admin.listPartitionReassignments()
                .reassignments().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
        for (Map.Entry<TopicPartition, PartitionReassignment> e : found.entrySet()) {
            PartitionReassignment r = e.getValue();
            OUT.println("ONGOING " + e.getKey().partition() + " " + ids(r.replicas()) + " "
                    + ids(r.addingReplicas()) + " " + ids(r.removingReplicas()));
        }
        OUT.println("REASSIGNING " + found.size());
    }

    private static String ids(List<Integer> ids) {
        return ids.isEmpty() ? "-" : ids.stream().map(String::valueOf).collect(Collectors.joining(","));
    }

    /** Sorted names, `-` for an empty set, `null` when the broker sent none. */
    private static String operations(Set<AclOperation> ops) {
        if (ops == null) {
            return "null";
        }
        if (ops.isEmpty()) {
            return "-";
        }
        return ops.stream().map(Enum::name).sorted().collect(Collectors.joining(","));
    }

    /** What `kafka-transactions.sh abort` does for a transaction left open on a
     *  partition: find the producers with an open transaction there (DescribeProducers),
     *  and abort each with Admin.abortTransaction (WriteTxnMarkers to the leader). */
    private static void abortHanging(String bootstrap, String topic, int partition) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        TopicPartition tp = new TopicPartition(topic, partition);
        try (Admin admin = Admin.create(props)) {
            List<ProducerState> producers = admin.describeProducers(List.of(tp))
                    .partitionResult(tp).get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS).activeProducers();
            int aborted = 0;
            for (ProducerState p : producers) {
                if (p.currentTransactionStartOffset().isEmpty()) {
                    continue;
                }
                AbortTransactionSpec spec = new AbortTransactionSpec(
                        tp, p.producerId(), (short) p.producerEpoch(), p.coordinatorEpoch().orElse(0));
                admin.abortTransaction(spec).all().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
                OUT.println("HANGING " + p.producerId() + " " + p.producerEpoch() + " "
                        + p.currentTransactionStartOffset().getAsLong());
                aborted++;
            }
            OUT.println("DONE aborted=" + aborted);
        }
    }

    // ------------------------------------------------------------------ producers

    private static Properties producerProps(String bootstrap) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return props;
    }

    /** Prints ACK or ERR for one send, counting each into {@code acked} or {@code failed}. */
    private static Callback reporter(String value, AtomicLong acked, AtomicLong failed) {
        return (metadata, exception) -> {
            if (exception == null) {
                acked.incrementAndGet();
                OUT.println("ACK " + metadata.partition() + " " + metadata.offset() + " " + value);
            } else {
                failed.incrementAndGet();
                OUT.println("ERR " + value + " " + oneLine(exception));
            }
        };
    }

    /** The value is also the key, so the default partitioner spreads the values. */
    private static ProducerRecord<String, String> record(String topic, String value) {
        return new ProducerRecord<>(topic, value, value);
    }

    /** `count` values `<codec>-<i>` from an idempotent acks=all producer, then flush. */
    private static void produce(String bootstrap, String topic, int count, String codec) throws Failure {
        Properties props = producerProps(bootstrap);
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                String value = codec + "-" + i;
                producer.send(record(topic, value), reporter(value, acked, failed));
            }
            producer.flush();
        }
        if (failed.get() > 0) {
            throw new Failure(failed.get() + " of " + count + " sends failed");
        }
        OUT.println("DONE acked=" + acked.get());
    }

    /**
     * An aborted transaction of `aborted-<i>` values, then a committed one of `committed-<i>`
     * values. The abort comes first so that a read_committed consumer asked for `count`
     * values would meet aborted values (if it were shown any) before it had enough.
     */
    private static void txn(String bootstrap, String topic, String transactionalId, int count)
            throws Failure {
        Properties props = producerProps(bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < count; i++) {
                String value = "aborted-" + i;
                producer.send(record(topic, value), reporter(value, acked, failed));
            }
            producer.flush(); // the values are in the log before the abort marks them
            producer.abortTransaction();
            OUT.println("ABORTED " + count);
            producer.beginTransaction();
            for (int i = 0; i < count; i++) {
                String value = "committed-" + i;
                producer.send(record(topic, value), reporter(value, acked, failed));
            }
            producer.commitTransaction();
            OUT.println("COMMITTED " + count);
        }
        if (failed.get() > 0) {
            throw new Failure(failed.get() + " of " + 2 * count + " sends failed");
        }
        OUT.println("DONE acked=" + acked.get());
    }

    /**
     * `<prefix>-<n>` values one after another, at most STREAM_MAX_UNACKED unacknowledged,
     * until stdin says stop; then flush, so every value sent has its ACK or ERR line.
     * Retries are the client's defaults within a long delivery timeout: a broker that
     * goes away for a while delays acks but need not fail them.
     */
    private static void streamProduce(String bootstrap, String topic, String prefix)
            throws Exception {
        Properties props = producerProps(bootstrap);
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "300000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        Semaphore unacked = new Semaphore(STREAM_MAX_UNACKED);
        Thread stdin = stdinWatcher();
        long sent = 0;
        String fatal = null;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            while (stdin.isAlive()) {
                if (!unacked.tryAcquire(100, TimeUnit.MILLISECONDS)) {
                    continue;
                }
                String value = prefix + "-" + sent;
                Callback report = reporter(value, acked, failed);
                try {
                    producer.send(record(topic, value), (metadata, exception) -> {
                        unacked.release();
                        report.onCompletion(metadata, exception);
                    });
                } catch (KafkaException e) {
                    // not a failed delivery but a producer that cannot go on
                    OUT.println("ERR " + value + " " + oneLine(e));
                    fatal = oneLine(e);
                    break;
                }
                sent++;
                Thread.sleep(STREAM_PAUSE_MS);
            }
            Thread waiting = flushReporter(producer, unacked);
            producer.flush();
            waiting.interrupt();
        }
        OUT.println("DONE acked=" + acked.get() + " failed=" + failed.get() + " sent=" + sent);
        if (fatal != null) {
            throw new Failure("the producer failed: " + fatal);
        }
    }

    /** While the last sends are flushed, a WAITING line every 10 s: how many are unacked
     *  and what the producer's own metrics say of them, so a flush that never ends (a
     *  test's timeout) leaves evidence of why in the output's tail. */
    private static Thread flushReporter(KafkaProducer<String, String> producer, Semaphore unacked) {
        List<String> wanted = List.of("record-retry-total", "record-error-total",
                "requests-in-flight", "metadata-age", "produce-throttle-time-max",
                "connection-count", "batch-split-total");
        Thread t = new Thread(() -> {
            try {
                while (true) {
                    Thread.sleep(10_000);
                    StringBuilder line = new StringBuilder("WAITING unacked=")
                            .append(STREAM_MAX_UNACKED - unacked.availablePermits());
                    producer.metrics().forEach((name, metric) -> {
                        if (name.group().equals("producer-metrics") && wanted.contains(name.name())) {
                            line.append(' ').append(name.name()).append('=').append(metric.metricValue());
                        }
                    });
                    OUT.println(line);
                }
            } catch (InterruptedException e) {
                // flushed
            }
        });
        t.setDaemon(true);
        t.start();
        return t;
    }

    // ------------------------------------------------------------------ consumers

    private static KafkaConsumer<String, String> consumer(String bootstrap, String group, String isolation) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return new KafkaConsumer<>(props);
    }

    /** Prints each rebalance, so a test can tell when the consumer got its partitions. */
    private static ConsumerRebalanceListener rebalances() {
        return new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                OUT.println("ASSIGNED " + partitionList(partitions));
            }

            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                OUT.println("REVOKED " + partitionList(partitions));
            }
        };
    }

    private static String partitionList(Collection<TopicPartition> partitions) {
        if (partitions.isEmpty()) {
            return "-";
        }
        return partitions.stream().map(tp -> Integer.toString(tp.partition())).sorted()
                .collect(Collectors.joining(","));
    }

    private static int printBatch(ConsumerRecords<String, String> records) {
        for (ConsumerRecord<String, String> r : records) {
            OUT.println("GOT " + r.partition() + " " + r.offset() + " " + r.value());
        }
        return records.count();
    }

    /**
     * Reads as a group member until `count` values arrived (then commits and exits 0) or
     * `timeoutMs` passed (a failure: exit 1 after the GOT lines seen so far). Commits
     * synchronously after every non-empty poll.
     */
    private static void consume(String bootstrap, String topic, String group, int count, long timeoutMs,
            String isolation) throws Failure {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        int got = 0;
        try (KafkaConsumer<String, String> consumer = consumer(bootstrap, group, isolation)) {
            consumer.subscribe(List.of(topic), rebalances());
            while (got < count && System.nanoTime() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(POLL);
                got += printBatch(records);
                if (!records.isEmpty()) {
                    consumer.commitSync();
                }
            }
        }
        if (got < count) {
            throw new Failure("timed out after " + timeoutMs + " ms with " + got + " of " + count + " values");
        }
        OUT.println("DONE got=" + got);
    }

    /**
     * A group member printing everything it reads until stdin says stop. A failed commit
     * is printed (`ERR commit ...`) and the member goes on: after a rebalance the values
     * since the last commit come again, as with any at-least-once consumer.
     */
    private static void streamConsume(String bootstrap, String topic, String group) {
        Thread stdin = stdinWatcher();
        long got = 0;
        try (KafkaConsumer<String, String> consumer = consumer(bootstrap, group, "read_uncommitted")) {
            consumer.subscribe(List.of(topic), rebalances());
            while (stdin.isAlive()) {
                ConsumerRecords<String, String> records = consumer.poll(POLL);
                got += printBatch(records);
                if (records.isEmpty()) {
                    continue;
                }
                try {
                    consumer.commitSync();
                } catch (KafkaException e) {
                    OUT.println("ERR commit " + oneLine(e));
                }
            }
        }
        OUT.println("DONE got=" + got);
    }

    // ------------------------------------------------------------------ helpers

    /** A daemon thread that ends when stdin has a line `stop` or closes. */
    private static Thread stdinWatcher() {
        Thread t = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null && !line.strip().equals("stop")) {
                    // other lines are ignored
                }
            } catch (java.io.IOException e) {
                // a broken stdin means the test is gone: stop as for `stop`
            }
        }, "stdin-watcher");
        t.setDaemon(true);
        t.start();
        return t;
    }

    /** An exception and its causes on one line (for ERR lines). */
    private static String oneLine(Throwable e) {
        List<String> parts = new ArrayList<>();
        for (Throwable t = e; t != null && parts.size() < 4; t = t.getCause()) {
            parts.add(t.getClass().getName() + ": " + t.getMessage());
        }
        return String.join(" <- ", parts).replaceAll("\\s+", " ");
    }
}
