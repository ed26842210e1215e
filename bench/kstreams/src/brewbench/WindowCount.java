package brewbench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.WindowStore;

/**
 * brewstream's tumbling event-time windows as a Kafka Streams application: the count and
 * the amount (in cents) of every order event per window, over all shops, final results
 * only. The DSL a Kafka Streams user writes for it:
 *
 * <ul>
 *   <li>the event time is the {@code event-time} header (8-byte big-endian unix
 *       nanoseconds; brewstream's format), read by a {@link TimestampExtractor}; a record
 *       without it keeps its Kafka timestamp;
 *   <li>every event is re-keyed to one key ("all": the windows are not per shop, as
 *       brewstream's are not), so {@code groupByKey} goes through a repartition topic and
 *       one task holds every window;
 *   <li>{@code TimeWindows.ofSizeAndGrace(--window-ms, --grace-ms)}: a window takes
 *       events until stream time (the highest event time the task has seen) reaches its
 *       end + grace; later ones are dropped;
 *   <li>{@code suppress(untilWindowCloses(unbounded()))}: one result per window, when it
 *       closes, to the output topic (key the window start in ms, value
 *       {@code {"start":ms,"end":ms,"count":n,"amount_cents":c}}).
 * </ul>
 *
 * <p>{@code processing.guarantee=exactly_once_v2} and every other setting as
 * {@link DrinkCount#config} sets it. It runs until SIGTERM; it prints one line when the
 * window aggregation has taken its first event, which says it is up.
 */
public final class WindowCount {
    static final String STORE = "window-sums";
    static final String EVENT_TIME = "event-time";
    private static final ObjectMapper JSON = new ObjectMapper();

    private WindowCount() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = DrinkCount.parse(argv);
        Duration size = Duration.ofMillis(Long.parseLong(args.getOrDefault("window-ms", "60000")));
        Duration grace = Duration.ofMillis(Long.parseLong(args.getOrDefault("grace-ms", "0")));
        AtomicBoolean first = new AtomicBoolean();
        KafkaStreams streams = new KafkaStreams(
                topology(args.get("input"), args.get("output"), size, grace, first).build(), DrinkCount.config(args));
        CountDownLatch failed = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            DrinkCount.say("state " + before + " -> " + now);
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.PENDING_ERROR) {
                failed.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(exc -> {
            DrinkCount.say("stream thread failed: " + exc);
            failed.countDown();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        DrinkCount.daemon(streams, failed);
    }

    static StreamsBuilder topology(String input, String output, Duration size, Duration grace, AtomicBoolean first) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray())
                        .withTimestampExtractor(new EventTime()))
                .flatMap((shop, event) -> {
                    Long cents = amountCents(event);
                    return cents == null ? Collections.<KeyValue<String, Long>>emptyList()
                            : List.of(KeyValue.pair("all", cents));
                })
                .groupByKey(Grouped.with("events-all", Serdes.String(), Serdes.Long()))
                .windowedBy(TimeWindows.ofSizeAndGrace(size, grace))
                .aggregate(() -> pack(0, 0), (all, cents, agg) -> {
                    if (!first.get() && first.compareAndSet(false, true)) {
                        DrinkCount.say("first event windowed");
                    }
                    ByteBuffer b = ByteBuffer.wrap(agg);
                    return pack(b.getLong(0) + 1, b.getLong(8) + cents);
                }, Materialized.<String, byte[], WindowStore<Bytes, byte[]>>as(STORE)
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.ByteArray()))
                .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                .toStream()
                .map((window, agg) -> {
                    ByteBuffer b = ByteBuffer.wrap(agg);
                    long start = window.window().start();
                    String value = "{\"start\":" + start + ",\"end\":" + window.window().end() + ",\"count\":"
                            + b.getLong(0) + ",\"amount_cents\":" + b.getLong(8) + "}";
                    return KeyValue.pair(Long.toString(start), value);
                })
                .to(output, Produced.with(Serdes.String(), Serdes.String()));
        return builder;
    }

    static byte[] pack(long count, long cents) {
        return ByteBuffer.allocate(16).putLong(count).putLong(cents).array();
    }

    /** The event's amount in whole cents (brewstream rounds amount x 100 the same way); null if it has none. */
    static Long amountCents(byte[] event) {
        if (event == null) {
            return null;
        }
        try {
            JsonNode amount = JSON.readTree(event).get("amount");
            if (amount == null || !amount.isNumber()) {
                return null;
            }
            return Math.round(amount.doubleValue() * 100);
        } catch (java.io.IOException e) {
            return null;
        }
    }

    /** The {@code event-time} header in milliseconds; the Kafka timestamp without one. */
    static final class EventTime implements TimestampExtractor {
        @Override
        public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
            Header header = record.headers().lastHeader(EVENT_TIME);
            if (header == null || header.value() == null || header.value().length != 8) {
                return record.timestamp();
            }
            return Math.floorDiv(ByteBuffer.wrap(header.value()).getLong(), 1_000_000L);
        }
    }
}
