package brewbench;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

/**
 * The drink count as a Kafka Streams application: the DSL topology a Kafka Streams user
 * writes for brewstream's job. Orders are flat-mapped into (drink, quantity) items (a bad
 * order yields none, {@link Orders}), grouped by drink (a repartition topic), and summed
 * with {@code aggregate} into a RocksDB store with its changelog; every change of a sum
 * goes to the output topic (key drink, value the sum as an 8-byte big-endian long).
 * {@code processing.guarantee=exactly_once_v2}; everything else is Kafka Streams' default
 * unless a flag sets it.
 *
 * <p>Modes: {@code count} stops once {@code --items} items have been summed and closes
 * cleanly (which commits the last transaction), then prints one {@code RESULT {json}}
 * line; with {@code --items 0} it stops as soon as it runs (start-up alone).
 * {@code daemon} runs until SIGTERM. {@code restore} starts on an empty state dir, lets
 * Kafka Streams restore the store from its changelog, prints the restore time and the
 * store's contents, and stops. Times are System.nanoTime(), CLOCK_MONOTONIC on Linux,
 * the clock of the harness.
 */
public final class DrinkCount {
    static final String STORE = "drink-sums";
    private static final ObjectMapper JSON = new ObjectMapper();

    private DrinkCount() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = parse(argv);
        String mode = args.getOrDefault("mode", "daemon");
        AtomicLong first = new AtomicLong();
        AtomicLong summed = new AtomicLong();
        KafkaStreams streams = new KafkaStreams(
                topology(args.get("input"), args.get("output"), first, summed).build(), config(args));
        CountDownLatch running = new CountDownLatch(1);
        CountDownLatch failed = new CountDownLatch(1);
        AtomicLong runningAt = new AtomicLong();
        streams.setStateListener((now, before) -> {
            say("state " + before + " -> " + now);
            if (now == KafkaStreams.State.RUNNING && runningAt.compareAndSet(0, System.nanoTime())) {
                running.countDown();
            }
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.PENDING_ERROR) {
                failed.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(exc -> {
            say("stream thread failed: " + exc);
            failed.countDown();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Restores restores = new Restores();
        streams.setGlobalStateRestoreListener(restores);
        switch (mode) {
            case "count" -> count(streams, Long.parseLong(args.getOrDefault("items", "0")), first, summed, running,
                    failed, runningAt);
            case "restore" -> restore(streams, Integer.parseInt(args.getOrDefault("restore-partitions", "1")),
                    restores, running, failed);
            case "daemon" -> daemon(streams, failed);
            default -> throw new IllegalArgumentException("unknown --mode " + mode);
        }
    }

    static StreamsBuilder topology(String input, String output, AtomicLong first, AtomicLong summed) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
                .flatMap((shop, order) -> {
                    if (first.get() == 0) {
                        first.compareAndSet(0, System.nanoTime());
                    }
                    return Orders.items(order);
                })
                .groupByKey(Grouped.with("items-by-drink", Serdes.String(), Serdes.Long()))
                .aggregate(() -> 0L, (drink, quantity, sum) -> {
                    summed.incrementAndGet();
                    return sum + quantity;
                }, Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as(STORE)
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        return builder;
    }

    static Properties config(Map<String, String> args) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args.get("app-id"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        p.put(StreamsConfig.STATE_DIR_CONFIG, args.get("state-dir"));
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, args.getOrDefault("threads", "1"));
        p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, args.getOrDefault("standby-replicas", "0"));
        // Start from the beginning of the input, as every system of the benchmark does.
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        if (args.containsKey("session-timeout-ms")) {
            int session = Integer.parseInt(args.get("session-timeout-ms"));
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), session);
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), Math.max(500, session / 3));
        }
        if (args.containsKey("instance-id")) {
            // Static membership: a restarted instance takes its old assignment back at once.
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG), args.get("instance-id"));
        }
        return p;
    }

    private static void count(KafkaStreams streams, long items, AtomicLong first, AtomicLong summed,
                              CountDownLatch running, CountDownLatch failed, AtomicLong runningAt)
            throws InterruptedException {
        long started = System.nanoTime();
        streams.start();
        while (failed.getCount() > 0) {
            if (items == 0 ? running.getCount() == 0 : summed.get() >= items) {
                break;
            }
            failed.await(2, TimeUnit.MILLISECONDS);
        }
        boolean ok = failed.getCount() > 0;
        // A clean close commits the open transaction: the last sums reach the output topic.
        boolean closed = streams.close(Duration.ofSeconds(120));
        long done = System.nanoTime();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("started", seconds(started));
        out.put("running", runningAt.get() == 0 ? null : seconds(runningAt.get()));
        out.put("first", first.get() == 0 ? null : seconds(first.get()));
        out.put("done", seconds(done));
        out.put("items", summed.get());
        out.put("closed_cleanly", closed);
        result(out);
        System.exit(ok && closed ? 0 : 1);
    }

    private static void restore(KafkaStreams streams, int partitions, Restores restores, CountDownLatch running,
                                CountDownLatch failed) throws Exception {
        streams.start();
        while (failed.getCount() > 0 && (running.getCount() > 0 || restores.ended.get() < partitions)) {
            failed.await(2, TimeUnit.MILLISECONDS);
        }
        if (failed.getCount() == 0) {
            streams.close(Duration.ofSeconds(60));
            System.exit(1);
        }
        Map<String, Long> latest = new HashMap<>();
        ReadOnlyKeyValueStore<String, Long> store = null;
        while (store == null) {
            try {
                store = streams.store(StoreQueryParameters.fromNameAndType(STORE, QueryableStoreTypes.keyValueStore()));
            } catch (org.apache.kafka.streams.errors.InvalidStateStoreException e) {
                Thread.sleep(10);
            }
        }
        try (KeyValueIterator<String, Long> all = store.all()) {
            while (all.hasNext()) {
                KeyValue<String, Long> kv = all.next();
                latest.put(kv.key, kv.value);
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("restore_s", (restores.lastEnd.get() - restores.firstStart.get()) / 1e9);
        out.put("records", restores.records.get());
        out.put("partitions", restores.ended.get());
        out.put("latest", latest);
        result(out);
        streams.close(Duration.ofSeconds(60));
        System.exit(0);
    }

    static void daemon(KafkaStreams streams, CountDownLatch failed) throws InterruptedException {
        // SIGTERM: close cleanly (the open transaction is committed), then the JVM exits.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> streams.close(Duration.ofSeconds(60)), "shutdown"));
        streams.start();
        failed.await();
        say("stopping after a failure");
        System.exit(1);
    }

    /** When restoration starts and ends, over all changelog partitions. */
    static final class Restores implements StateRestoreListener {
        final AtomicLong firstStart = new AtomicLong();
        final AtomicLong lastEnd = new AtomicLong();
        final AtomicLong records = new AtomicLong();
        final AtomicInteger ended = new AtomicInteger();

        @Override
        public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
            firstStart.compareAndSet(0, System.nanoTime());
            say("restoring " + tp + " offsets " + start + ".." + end);
        }

        @Override
        public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long restored) {
            records.addAndGet(restored);
        }

        @Override
        public void onRestoreEnd(TopicPartition tp, String store, long total) {
            lastEnd.set(System.nanoTime());
            ended.incrementAndGet();
            say("restored " + tp + ": " + total + " records");
        }
    }

    private static double seconds(long nanos) {
        return nanos / 1e9;
    }

    static void say(String line) {
        System.out.println(String.format("%.6f %s", seconds(System.nanoTime()), line));
        System.out.flush();
    }

    private static void result(Map<String, Object> out) {
        try {
            System.out.println("RESULT " + JSON.writeValueAsString(out));
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
        System.out.flush();
    }

    static Map<String, String> parse(String[] argv) {
        Map<String, String> out = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("expected --name value pairs, got " + String.join(" ", argv));
            }
            out.put(argv[i].substring(2), argv[++i]);
        }
        for (String required : new String[] {"bootstrap", "input", "output", "app-id", "state-dir"}) {
            if (!out.containsKey(required)) {
                throw new IllegalArgumentException("--" + required + " is required");
            }
        }
        return out;
    }
}
