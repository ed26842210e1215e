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
 * Blob out, big-endian: long orders, long unclean, byte overflow (1: some task left
 * rows it could not carry, and none are carried); int drinks, then each: int length,
 * the name's bytes, long sum; int partitions, then each: int partition, long highest
 * offset; int carried, then each: int partition, long offset, int key length (-1 for
 * null), key, int value length (-1 for null), value.
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
        GateTotals.Totals totals;
        final Map<Integer, Long> highest = new HashMap<>();
        byte[] carried = new byte[0];
        int carriedRows;
        boolean overflow;
    }

    /** The batch's count: the blob described above, handed over through path (Blobs.handOver). */
    public static Object count(Dataset<Row> rows, int maxNameBytes, int carryRows, long carryBytes, String path) {
        return Blobs.handOver(blob(rows, maxNameBytes, carryRows, carryBytes), path);
    }

    private static byte[] blob(Dataset<Row> rows, int maxNameBytes, int carryRows, long carryBytes) {
        GateTotals sums = new GateTotals(maxNameBytes);
        List<Part> parts = rows.select("key", "value", "partition", "offset").queryExecution().toRdd().toJavaRDD()
                .mapPartitions((Iterator<InternalRow> it) -> List.of(task(it, sums, carryRows, carryBytes)).iterator())
                .collect();
        GateTotals.Totals totals = sums.zero();
        Map<Integer, Long> highest = new HashMap<>();
        boolean overflow = false;
        int carriedRows = 0;
        for (Part part : parts) {
            totals = sums.merge(totals, part.totals);
            part.highest.forEach((p, o) -> highest.merge(p, o, Math::max));
            overflow |= part.overflow;
            carriedRows += part.carriedRows;
        }
        totals = sums.finish(totals);
        try {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            DataOutputStream out = new DataOutputStream(bytes);
            out.writeLong(totals.getOrders());
            out.writeLong(totals.getUnclean());
            out.writeByte(overflow ? 1 : 0);
            out.writeInt(totals.getCounts().size());
            for (Map.Entry<String, Long> drink : totals.getCounts().entrySet()) {
                byte[] name = drink.getKey().getBytes(StandardCharsets.ISO_8859_1);  // as GateTotals made it
                out.writeInt(name.length);
                out.write(name);
                out.writeLong(drink.getValue());
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

    private static Part task(Iterator<InternalRow> rows, GateTotals sums, int carryRows, long carryBytes) {
        Part part = new Part();
        part.totals = sums.zero();
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
                long uncleanBefore = part.totals.getUnclean();
                part.totals = sums.reduce(part.totals, value);
                if (part.totals.getUnclean() == uncleanBefore || part.overflow) continue;
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
