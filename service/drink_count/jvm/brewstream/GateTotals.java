/*
 * The JVM's count of a batch: the order gate's verdicts summed inside each Spark task.
 *
 * An aggregate function over a record's value: per group (GateCount's is one Spark
 * task's rows), the quantity per drink of the orders OrderGate proves clean, how many those
 * are, and how many values it left (null ones included), which the Python path then
 * counts or sends to the DLQ (aggregate_batch in service/drink_count/aggregate.py). What
 * clean means and how an order is counted is OrderGate's alone; this class only adds up.
 *
 * Why an aggregate and not the gate's map exploded into rows and grouped: each task keeps
 * one table of drinks and adds each order into it, so no row per order item is built,
 * converted to Spark's types and hashed, and the code the JIT has to compile for a cold
 * batch is this class and the gate (docs/benchmarks.md). The table is keyed by a name's bytes
 * in the value (Drinks) and the gate's scanner is reused, so an order makes no object.
 *
 * tests/integration/test_order_gate.py checks, through this class itself, that reduce and
 * merge over any values and any split give the sums of OrderGate.gate value by value.
 */
package brewstream;

import java.io.IOException;
import java.io.ObjectOutputStream;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.expressions.Aggregator;

public final class GateTotals extends Aggregator<byte[], GateTotals.Totals, GateTotals.Totals> {
    private final int maxNameBytes;

    public GateTotals(int maxNameBytes) { this.maxNameBytes = maxNameBytes; }

    /** What a group adds up to; also the result, as struct<counts: map<string,bigint>,
     *  orders: bigint, unclean: bigint> (a bean: Spark maps it by its getters).
     *
     *  While a task adds orders, the sums per drink run in a table keyed by the name's bytes
     *  (Drinks), so an order costs no String, no boxed Long and no map entry; they are
     *  folded into counts whenever anything reads or serializes the totals. */
    public static final class Totals implements Serializable {
        private static final long serialVersionUID = 1L;
        private Map<String, Long> counts = new HashMap<>();
        private long orders;
        private long unclean;
        private transient Drinks running;
        private transient OrderGate.Scan scan;

        public Map<String, Long> getCounts() { fold(); return counts; }
        public void setCounts(Map<String, Long> counts) { this.counts = counts; }
        public long getOrders() { return orders; }
        public void setOrders(long orders) { this.orders = orders; }
        public long getUnclean() { return unclean; }
        public void setUnclean(long unclean) { this.unclean = unclean; }

        void fold() {
            if (running != null) {
                running.foldInto(counts);
                running = null;
            }
        }

        private void writeObject(ObjectOutputStream out) throws IOException {
            fold();
            out.defaultWriteObject();
        }
    }

    @Override
    public Totals zero() { return new Totals(); }

    @Override
    public Totals reduce(Totals totals, byte[] value) {
        if (value == null) {
            totals.unclean++;
            return totals;
        }
        if (totals.scan == null) totals.scan = new OrderGate.Scan(maxNameBytes);
        OrderGate.Scan scan = totals.scan;
        if (!scan.clean(value)) {
            totals.unclean++;
            return totals;
        }
        totals.orders++;
        if (totals.running == null) totals.running = new Drinks();
        for (int k = 0; k < scan.items; k++) {
            totals.running.add(value, scan.drinkStart[k], scan.drinkLength[k], scan.quantity[k]);
        }
        return totals;
    }

    @Override
    public Totals merge(Totals a, Totals b) {
        a.fold();
        b.fold();
        a.orders += b.orders;
        a.unclean += b.unclean;
        for (Map.Entry<String, Long> item : b.counts.entrySet()) a.counts.merge(item.getKey(), item.getValue(), Long::sum);
        return a;
    }

    @Override
    public Totals finish(Totals totals) {
        totals.fold();
        return totals;
    }

    // Spark serializes a buffer only between a task and the final merge: one per task.
    @Override
    public Encoder<Totals> bufferEncoder() { return Encoders.javaSerialization(Totals.class); }

    @Override
    public Encoder<Totals> outputEncoder() { return Encoders.bean(Totals.class); }

    /** Sums per drink name, found by the name's bytes in the value (open addressing). A
     *  name's String is made once, the first time the table meets it. */
    static final class Drinks {
        private byte[][] names = new byte[32][];
        private long[] sums = new long[32];
        private int size;

        void add(byte[] value, int start, int length, long qty) {
            int mask = names.length - 1;
            int slot = hash(value, start, length) & mask;
            while (true) {
                byte[] name = names[slot];
                if (name == null) {
                    names[slot] = java.util.Arrays.copyOfRange(value, start, start + length);
                    sums[slot] = qty;
                    if (++size * 2 > names.length) grow();
                    return;
                }
                if (name.length == length && java.util.Arrays.equals(name, 0, length, value, start, start + length)) {
                    sums[slot] += qty;
                    return;
                }
                slot = (slot + 1) & mask;
            }
        }

        void foldInto(Map<String, Long> counts) {
            for (int k = 0; k < names.length; k++) {
                if (names[k] != null) {
                    counts.merge(new String(names[k], StandardCharsets.ISO_8859_1), sums[k], Long::sum);
                }
            }
        }

        private void grow() {
            byte[][] oldNames = names;
            long[] oldSums = sums;
            names = new byte[oldNames.length * 2][];
            sums = new long[oldNames.length * 2];
            size = 0;
            for (int k = 0; k < oldNames.length; k++) {
                if (oldNames[k] != null) add(oldNames[k], 0, oldNames[k].length, oldSums[k]);
            }
        }

        private static int hash(byte[] b, int start, int length) {
            int h = 1;
            for (int k = start; k < start + length; k++) h = 31 * h + b[k];
            return h ^ (h >>> 16);
        }
    }
}
