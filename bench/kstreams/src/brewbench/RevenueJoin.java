package brewbench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.LogAndContinueExceptionHandler;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * brewstream's revenue pipeline as a Kafka Streams application: every order item priced
 * with the menu version valid at the order's event time, summed in cents per drink and per
 * shop. The DSL a Kafka Streams user writes for it (KIP-889 versioned stores, KIP-923
 * stream-table join with grace):
 *
 * <ul>
 *   <li>the menu topic (key the drink, value {@code {"drink","price_cents","currency"}}, an
 *       empty value withdraws the drink) is a {@code KTable} materialized in
 *       {@code Stores.persistentVersionedKeyValueStore(--retention-ms)}; each version is
 *       valid from its record timestamp, which {@link WindowCount.EventTime} takes from the
 *       {@code event-time} header (8-byte big-endian unix ns; the Kafka timestamp without
 *       one), truncated to milliseconds, Kafka Streams' unit of time;
 *   <li>orders (key the shop) are flat-mapped into one record per item, keyed by drink, with
 *       the order's event time as record timestamp, and go through a named repartition
 *       topic, co-partitioned with the menu;
 *   <li>{@code leftJoin} with {@code Joined.withGracePeriod(--grace-ms)}: an item waits in a
 *       time-ordered buffer until the join's own clock (the highest item timestamp the join
 *       processor of its task has seen; menu records do not move it) reaches its time +
 *       grace, then takes the menu version valid at its time ({@code get(drink, t)});
 *   <li>a priced item adds price x quantity to its drink's and its shop's sum (two
 *       {@code aggregate}s; the shop one behind a second repartition); every change of a
 *       sum goes to the by-drink / by-shop topic (key the drink / shop, value the sum in
 *       cents as an 8-byte big-endian long, as {@link DrinkCount} writes its counts);
 *   <li>an item without a price at its time goes to the DLQ topic (key the drink, value
 *       {@code {"drink","shop_id","quantity","reason"}}, timestamp the order's event time);
 *   <li>with {@code --audit TOPIC}, every item that left the join also goes there as it
 *       is ({@link Item}'s bytes, the price filled in), timestamp the order's event time.
 * </ul>
 *
 * <p>The shop is the order's key (the orders topic is keyed by shop_id); the order rules
 * are {@link Orders}'. {@code processing.guarantee=exactly_once_v2} and every other
 * setting as {@link DrinkCount#config} sets it. {@code --mode count} stops once
 * {@code --items} items have left the join and reached their sums (or the DLQ), then closes
 * cleanly and prints one {@code RESULT {json}} line; with {@code --stall-exit-ms} it also
 * stops when nothing has left the join for that long (items still waiting for the join's
 * clock), and says so. {@code --mode daemon} runs until SIGTERM.
 */
public final class RevenueJoin {
    static final String MENU_STORE = "menu-versions";
    static final String DRINK_STORE = "revenue-by-drink";
    static final String SHOP_STORE = "revenue-by-shop";
    static final long NO_PRICE = Long.MIN_VALUE;
    private static final ObjectMapper JSON = new ObjectMapper();

    private RevenueJoin() {}

    /** What the topology has done so far, for the count mode's stop rule and its result. */
    static final class Progress {
        final AtomicLong first = new AtomicLong();
        final AtomicLong orders = new AtomicLong();
        final AtomicLong badOrders = new AtomicLong();
        final AtomicLong drinkSummed = new AtomicLong();
        final AtomicLong shopSummed = new AtomicLong();
        final AtomicLong unpriced = new AtomicLong();
        final AtomicLong lastChange = new AtomicLong();

        long joined() {
            return drinkSummed.get() + unpriced.get();
        }

        void touched() {
            lastChange.set(System.nanoTime());
        }
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = parse(argv);
        String mode = args.getOrDefault("mode", "daemon");
        Duration grace = Duration.ofMillis(Long.parseLong(args.getOrDefault("grace-ms", "10000")));
        Duration retention = Duration.ofMillis(Long.parseLong(args.getOrDefault("retention-ms", "86400000")));
        Progress progress = new Progress();
        StreamsBuilder builder = topology(args.get("orders"), args.get("menu"), args.get("by-drink"),
                args.get("by-shop"), args.get("dlq"), args.get("audit"), grace, retention, progress);
        KafkaStreams streams = new KafkaStreams(builder.build(), config(args));
        CountDownLatch failed = new CountDownLatch(1);
        AtomicLong runningAt = new AtomicLong();
        streams.setStateListener((now, before) -> {
            DrinkCount.say("state " + before + " -> " + now);
            if (now == KafkaStreams.State.RUNNING) {
                runningAt.compareAndSet(0, System.nanoTime());
            }
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.PENDING_ERROR) {
                failed.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(exc -> {
            DrinkCount.say("stream thread failed: " + exc);
            failed.countDown();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        switch (mode) {
            case "count" -> count(streams, Long.parseLong(args.getOrDefault("items", "0")),
                    Long.parseLong(args.getOrDefault("stall-exit-ms", "0")), progress, failed, runningAt);
            case "daemon" -> DrinkCount.daemon(streams, failed);
            default -> throw new IllegalArgumentException("unknown --mode " + mode);
        }
    }

    static StreamsBuilder topology(String ordersTopic, String menuTopic, String byDrink, String byShop, String dlq,
                                   String audit, Duration grace, Duration retention, Progress progress) {
        StreamsBuilder builder = new StreamsBuilder();
        Serde<Long> price = Serdes.serdeFrom(new PriceSerializer(), new PriceDeserializer());
        KTable<String, Long> menu = builder.table(menuTopic,
                Consumed.with(Serdes.String(), price).withTimestampExtractor(new WindowCount.EventTime())
                        .withName("menu-source"),
                Materialized.<String, Long>as(Stores.persistentVersionedKeyValueStore(MENU_STORE, retention))
                        .withKeySerde(Serdes.String()).withValueSerde(price));

        KStream<String, byte[]> items = builder.stream(ordersTopic,
                        Consumed.with(Serdes.ByteArray(), Serdes.ByteArray())
                                .withTimestampExtractor(new WindowCount.EventTime()).withName("orders-source"))
                .flatMap((shop, order) -> {
                    if (progress.first.get() == 0) {
                        progress.first.compareAndSet(0, System.nanoTime());
                    }
                    progress.orders.incrementAndGet();
                    List<KeyValue<String, Long>> good = Orders.items(order);
                    if (good.isEmpty() || shop == null) {
                        progress.badOrders.incrementAndGet();
                        return Collections.<KeyValue<String, byte[]>>emptyList();
                    }
                    List<KeyValue<String, byte[]>> out = new ArrayList<>(good.size());
                    for (KeyValue<String, Long> item : good) {
                        out.add(KeyValue.pair(item.key, Item.pack(item.value, NO_PRICE, shop)));
                    }
                    return out;
                }, Named.as("order-items"))
                .repartition(Repartitioned.<String, byte[]>as("items-by-drink")
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.ByteArray()));

        KStream<String, byte[]> joined = items.leftJoin(menu,
                (drink, item, cents) -> Item.priced(item, cents == null ? NO_PRICE : cents),
                Joined.<String, byte[], Long>with(Serdes.String(), Serdes.ByteArray(), price)
                        .withGracePeriod(grace).withName("price-at-order-time"));

        if (audit != null) {
            // Every item as it left the join, with the price it got: a harness can then tell
            // which items were priced differently from its own as-of lookup, and how.
            joined.to(audit, Produced.with(Serdes.String(), Serdes.ByteArray()));
        }
        joined.filter((drink, item) -> Item.price(item) == NO_PRICE, Named.as("unpriced"))
                .mapValues((drink, item) -> {
                    progress.unpriced.incrementAndGet();
                    progress.touched();
                    return dlqValue(drink, item);
                }, Named.as("dlq-value"))
                .to(dlq, Produced.with(Serdes.String(), Serdes.ByteArray()));

        KStream<String, byte[]> priced = joined.filter((drink, item) -> Item.price(item) != NO_PRICE,
                Named.as("priced"));
        priced.mapValues(Item::cents, Named.as("drink-cents"))
                .groupByKey(Grouped.with("revenue-drink", Serdes.String(), Serdes.Long()))
                .aggregate(() -> 0L, (drink, cents, sum) -> {
                    progress.drinkSummed.incrementAndGet();
                    progress.touched();
                    return sum + cents;
                }, Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as(DRINK_STORE)
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream()
                .to(byDrink, Produced.with(Serdes.String(), Serdes.Long()));
        priced.map((drink, item) -> KeyValue.pair(Item.shop(item), Item.cents(item)), Named.as("shop-cents"))
                .groupByKey(Grouped.with("revenue-shop", Serdes.String(), Serdes.Long()))
                .aggregate(() -> 0L, (shop, cents, sum) -> {
                    progress.shopSummed.incrementAndGet();
                    return sum + cents;
                }, Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as(SHOP_STORE)
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream()
                .to(byShop, Produced.with(Serdes.String(), Serdes.Long()));
        return builder;
    }

    static Properties config(Map<String, String> args) {
        Properties p = DrinkCount.config(args);
        // A menu record that is not JSON is skipped (and logged), not a reason to stop pricing.
        p.put(StreamsConfig.DESERIALIZATION_EXCEPTION_HANDLER_CLASS_CONFIG, LogAndContinueExceptionHandler.class);
        return p;
    }

    private static void count(KafkaStreams streams, long items, long stallExitMs, Progress progress,
                              CountDownLatch failed, AtomicLong runningAt) throws InterruptedException {
        long started = System.nanoTime();
        progress.touched();
        streams.start();
        boolean stalled = false;
        while (failed.getCount() > 0) {
            long joined = progress.joined();
            // Every item out of the join, and the shop sums caught up with the drink sums
            // (they sit behind a repartition topic, so they are the last to see an item).
            if (joined >= items && progress.shopSummed.get() >= progress.drinkSummed.get()) {
                break;
            }
            if (stallExitMs > 0 && progress.first.get() != 0
                    && System.nanoTime() - progress.lastChange.get() > stallExitMs * 1_000_000L) {
                stalled = true;
                break;
            }
            failed.await(2, TimeUnit.MILLISECONDS);
        }
        boolean ok = failed.getCount() > 0;
        long done = stalled ? progress.lastChange.get() : System.nanoTime();
        // A clean close commits the open transaction: the last sums reach the output topics.
        boolean closed = streams.close(Duration.ofSeconds(120));
        long closedAt = System.nanoTime();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("started", started / 1e9);
        out.put("running", runningAt.get() == 0 ? null : runningAt.get() / 1e9);
        out.put("first", progress.first.get() == 0 ? null : progress.first.get() / 1e9);
        out.put("done", done / 1e9);
        out.put("closed", closedAt / 1e9);
        out.put("orders", progress.orders.get());
        out.put("bad_orders", progress.badOrders.get());
        out.put("items_joined", progress.joined());
        out.put("priced", progress.drinkSummed.get());
        out.put("shop_summed", progress.shopSummed.get());
        out.put("unpriced", progress.unpriced.get());
        out.put("stalled", stalled);
        out.put("closed_cleanly", closed);
        try {
            System.out.println("RESULT " + JSON.writeValueAsString(out));
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
        System.out.flush();
        System.exit(ok && closed ? 0 : 1);
    }

    private static byte[] dlqValue(String drink, byte[] item) {
        ObjectNode doc = JSON.createObjectNode();
        doc.put("drink", drink);
        doc.put("shop_id", Item.shop(item));
        doc.put("quantity", Item.quantity(item));
        doc.put("reason", "no price at the order's event time");
        try {
            return JSON.writeValueAsBytes(doc);
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * An item between the order parser and the sums, as bytes (it crosses a repartition topic
     * and the join's buffer): quantity (8 bytes), price in cents or {@link #NO_PRICE} (8),
     * then the shop in UTF-8.
     */
    static final class Item {
        private Item() {}

        static byte[] pack(long quantity, long price, byte[] shop) {
            return ByteBuffer.allocate(16 + shop.length).putLong(quantity).putLong(price).put(shop).array();
        }

        static byte[] priced(byte[] item, long price) {
            byte[] out = item.clone();
            ByteBuffer.wrap(out).putLong(8, price);
            return out;
        }

        static long quantity(byte[] item) {
            return ByteBuffer.wrap(item).getLong(0);
        }

        static long price(byte[] item) {
            return ByteBuffer.wrap(item).getLong(8);
        }

        static long cents(byte[] item) {
            return Math.multiplyExact(quantity(item), price(item));
        }

        static String shop(byte[] item) {
            return new String(item, 16, item.length - 16, StandardCharsets.UTF_8);
        }
    }

    /** A menu value's {@code price_cents}; null (the drink withdrawn) for an empty value. */
    static final class PriceDeserializer implements Deserializer<Long> {
        @Override
        public Long deserialize(String topic, byte[] data) {
            if (data == null || data.length == 0) {
                return null;
            }
            JsonNode doc;
            try {
                doc = JSON.readTree(data);
            } catch (IOException e) {
                throw new org.apache.kafka.common.errors.SerializationException("menu value is not JSON", e);
            }
            JsonNode cents = doc == null ? null : doc.get("price_cents");
            if (cents == null || !cents.isIntegralNumber() || !cents.canConvertToLong() || cents.longValue() < 0) {
                throw new org.apache.kafka.common.errors.SerializationException(
                        "menu value without a whole non-negative price_cents");
            }
            return cents.longValue();
        }
    }

    /** The store's changelog keeps the menu's own JSON shape (only the price is read back). */
    static final class PriceSerializer implements Serializer<Long> {
        @Override
        public byte[] serialize(String topic, Long cents) {
            return cents == null ? null : ("{\"price_cents\":" + cents + "}").getBytes(StandardCharsets.UTF_8);
        }
    }

    static Map<String, String> parse(String[] argv) {
        Map<String, String> out = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("expected --name value pairs, got " + String.join(" ", argv));
            }
            out.put(argv[i].substring(2), argv[++i]);
        }
        for (String required : new String[] {"bootstrap", "orders", "menu", "by-drink", "by-shop", "dlq", "app-id",
                "state-dir"}) {
            if (!out.containsKey(required)) {
                throw new IllegalArgumentException("--" + required + " is required");
            }
        }
        return out;
    }
}
