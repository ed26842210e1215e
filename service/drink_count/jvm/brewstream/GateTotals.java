/*
 * The JVM's count of a batch: the order gate's verdicts summed inside each Spark task.
 *
 * An aggregate function over a record's value: per group (brewstream groups by input
 * partition), the quantity per drink of the orders OrderGate proves clean, how many those
 * are, and how many values it left (null ones included), which the Python path then
 * counts or sends to the DLQ (aggregate_batch in service/drink_count/aggregate.py). What
 * clean means and how an order is counted is OrderGate's alone; this class only adds up.
 *
 * Why an aggregate and not the gate's map exploded into rows and grouped: each task keeps
 * one HashMap of drinks and adds each order into it, so no row per order item is built,
 * converted to Spark's types and hashed, and the code the JIT has to compile for a cold
 * batch is this class and the gate (BENCHMARKS.md).
 *
 * tests/integration/test_order_gate.py checks, through this class itself, that reduce and
 * merge over any values and any split give the sums of OrderGate.gate value by value.
 */
package brewstream;

import java.io.Serializable;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.expressions.Aggregator;
import org.apache.spark.sql.functions;

public final class GateTotals extends Aggregator<byte[], GateTotals.Totals, GateTotals.Totals> {
    private final int maxNameBytes;

    public GateTotals(int maxNameBytes) { this.maxNameBytes = maxNameBytes; }

    /** Registers name(value) in the session once: a second registration of a name would
     *  replace the first with a warning in the log, and aggregate_batch asks every batch. */
    public static void register(SparkSession spark, String name, int maxNameBytes) {
        if (!spark.catalog().functionExists(name)) {
            spark.udf().register(name, functions.udaf(new GateTotals(maxNameBytes), Encoders.BINARY()));
        }
    }

    /** What a group adds up to; also the result, as struct<counts: map<string,bigint>,
     *  orders: bigint, unclean: bigint> (a bean: Spark maps it by its getters). */
    public static final class Totals implements Serializable {
        private static final long serialVersionUID = 1L;
        private Map<String, Long> counts = new HashMap<>();
        private long orders;
        private long unclean;

        public Map<String, Long> getCounts() { return counts; }
        public void setCounts(Map<String, Long> counts) { this.counts = counts; }
        public long getOrders() { return orders; }
        public void setOrders(long orders) { this.orders = orders; }
        public long getUnclean() { return unclean; }
        public void setUnclean(long unclean) { this.unclean = unclean; }
    }

    @Override
    public Totals zero() { return new Totals(); }

    @Override
    public Totals reduce(Totals totals, byte[] value) {
        Map<String, Long> order = value == null ? null : OrderGate.gate(value, maxNameBytes);
        if (order == null) {
            totals.unclean++;
            return totals;
        }
        totals.orders++;
        for (Map.Entry<String, Long> item : order.entrySet()) totals.counts.merge(item.getKey(), item.getValue(), Long::sum);
        return totals;
    }

    @Override
    public Totals merge(Totals a, Totals b) {
        a.orders += b.orders;
        a.unclean += b.unclean;
        for (Map.Entry<String, Long> item : b.counts.entrySet()) a.counts.merge(item.getKey(), item.getValue(), Long::sum);
        return a;
    }

    @Override
    public Totals finish(Totals totals) { return totals; }

    // Spark serializes a buffer only between a task and the final merge: one per task.
    @Override
    public Encoder<Totals> bufferEncoder() { return Encoders.javaSerialization(Totals.class); }

    @Override
    public Encoder<Totals> outputEncoder() { return Encoders.bean(Totals.class); }
}
