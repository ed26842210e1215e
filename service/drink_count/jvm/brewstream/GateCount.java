/*
 * A batch's count in the JVM in one stage: each Spark task adds up the order gate's
 * verdicts over its rows (GateTotals), notes each input partition's highest offset and
 * carries the rows the gate left (its unclean ones) whole, while they fit a budget; the
 * driver merges what the tasks return and hands Python one blob (its layout below,
 * read_gate_count in service/drink_count/aggregate.py).
 *
 * Why not Spark SQL's groupBy with GateTotals as an aggregate function: that plan has a
 * shuffle (a second stage), a dozen calls from Python to build, and its result crosses to
 * Python as Arrow; and the rows the gate left needed a second job through the Python
 * workers, so a batch with one bad order ran twice and started the workers. Here the
 * carried rows are counted by the driver's Python, with the same code the workers run,
 * and only a task over its budget sends the batch down the workers' path
 * (aggregate_batch).
 *
 * Rows in: any with key binary, value binary, partition int and offset long (Spark's Kafka
 * source's); this class picks those columns itself, so Python builds nothing per batch.
 *
 * By partition (the input stage of a shuffle, restorer/shuffle.py), the sums are kept
 * apart per input partition, which a task's rows nearly always share (a Kafka source's
 * task reads one partition); otherwise they are merged into one group (partition -1).
 *
 * Blob out, big-endian: long orders, long unclean, byte overflow (1: some task left
 * rows it could not carry, and none are carried); int groups, then each: int partition
 * (-1: every partition's), long orders (the group's clean ones), int drinks, then each:
 * int length, the name's bytes, long sum;
 * int partitions, then each: int partition, long highest offset; int carried, then each:
 * int partition, long offset, int key length (-1 for null), key, int value length (-1
 * for null), value.
 */
package brewstream;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;

public final class GateCount {
    private GateCount() {}

    /** What one task returns. */
    static final class Part implements Serializable {
        private static final long serialVersionUID = 1L;
        final Map<Integer, GateTotals.Totals> groups = new HashMap<>();  // partition (or -1) -> sums
        final Map<Integer, Long> highest = new HashMap<>();
        byte[] carried = new byte[0];
        int carriedRows;
        boolean overflow;
    }

    /** The batch's count: the blob described above, handed over through path (Blobs.handOver). */
    public static Object count(Dataset<Row> rows, int maxNameBytes, int carryRows, long carryBytes, String path) {
        return count(rows, maxNameBytes, carryRows, carryBytes, false, path);
    }

    public static Object count(Dataset<Row> rows, int maxNameBytes, int carryRows, long carryBytes,
                               boolean byPartition, String path) {
        return Blobs.handOver(blob(rows, maxNameBytes, carryRows, carryBytes, byPartition), path);
    }

    private static byte[] blob(Dataset<Row> rows, int maxNameBytes, int carryRows, long carryBytes,
                               boolean byPartition) {
        GateTotals sums = new GateTotals(maxNameBytes);
        List<Part> parts = rows.select("key", "value", "partition", "offset").queryExecution().toRdd().toJavaRDD()
                .mapPartitions((Iterator<InternalRow> it) ->
                        List.of(task(it, sums, carryRows, carryBytes, byPartition)).iterator())
                .collect();
        Map<Integer, GateTotals.Totals> groups = new HashMap<>();
        Map<Integer, Long> highest = new HashMap<>();
        boolean overflow = false;
        int carriedRows = 0;
        for (Part part : parts) {
            part.groups.forEach((p, t) -> groups.merge(p, t, sums::merge));
            part.highest.forEach((p, o) -> highest.merge(p, o, Math::max));
            overflow |= part.overflow;
            carriedRows += part.carriedRows;
        }
        long orders = 0;
        long unclean = 0;
        for (GateTotals.Totals t : groups.values()) {
            sums.finish(t);
            orders += t.getOrders();
            unclean += t.getUnclean();
        }
        try {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            DataOutputStream out = new DataOutputStream(bytes);
            out.writeLong(orders);
            out.writeLong(unclean);
            out.writeByte(overflow ? 1 : 0);
            out.writeInt(groups.size());
            for (Map.Entry<Integer, GateTotals.Totals> group : groups.entrySet()) {
                out.writeInt(group.getKey());
                out.writeLong(group.getValue().getOrders());
                Map<String, Long> counts = group.getValue().getCounts();
                out.writeInt(counts.size());
                for (Map.Entry<String, Long> drink : counts.entrySet()) {
                    byte[] name = drink.getKey().getBytes(StandardCharsets.ISO_8859_1);  // as GateTotals made it
                    out.writeInt(name.length);
                    out.write(name);
                    out.writeLong(drink.getValue());
                }
            }
            out.writeInt(highest.size());
            for (Map.Entry<Integer, Long> top : highest.entrySet()) {
                out.writeInt(top.getKey());
                out.writeLong(top.getValue());
            }
            out.writeInt(overflow ? 0 : carriedRows);
            if (!overflow) {
                for (Part part : parts) out.write(part.carried);
            }
            out.flush();
            return bytes.toByteArray();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static Part task(Iterator<InternalRow> rows, GateTotals sums, int carryRows, long carryBytes,
                             boolean byPartition) {
        Part part = new Part();
        int group = -1;
        GateTotals.Totals totals = null;
        ByteArrayOutputStream buffer = new ByteArrayOutputStream();
        DataOutputStream carried = new DataOutputStream(buffer);
        try {
            while (rows.hasNext()) {
                InternalRow row = rows.next();
                byte[] value = row.isNullAt(1) ? null : row.getBinary(1);
                int partition = row.getInt(2);
                long offset = row.getLong(3);
                Long top = part.highest.get(partition);
                if (top == null || offset > top) part.highest.put(partition, offset);
                int groupOf = byPartition ? partition : -1;
                if (totals == null || groupOf != group) {  // once per task, nearly always
                    group = groupOf;
                    totals = part.groups.computeIfAbsent(group, g -> sums.zero());
                }
                long uncleanBefore = totals.getUnclean();
                totals = sums.reduce(totals, value);
                if (totals.getUnclean() == uncleanBefore || part.overflow) continue;
                byte[] key = row.isNullAt(0) ? null : row.getBinary(0);
                long size = (key == null ? 0 : key.length) + (value == null ? 0 : value.length);
                if (part.carriedRows >= carryRows || carried.size() + size > carryBytes) {
                    part.overflow = true;  // the batch's unclean rows go the workers' way
                    part.carriedRows = 0;
                    continue;
                }
                carried.writeInt(partition);
                carried.writeLong(offset);
                Blobs.writeBytes(carried, key);
                Blobs.writeBytes(carried, value);
                part.carriedRows++;
            }
            carried.flush();
            if (!part.overflow) part.carried = buffer.toByteArray();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return part;
    }
}
