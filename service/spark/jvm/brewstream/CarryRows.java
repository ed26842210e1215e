/*
 * A small batch's rows, carried whole to the driver in one stage: each Spark task writes
 * its rows into a blob, the driver concatenates them, and Python reads the result once
 * (read_carried_rows in service/spark/carried.py) and runs the same pure code the Python
 * workers would run over it. Collecting through PySpark (toArrow) or handing the rows to
 * the workers (mapInArrow) costs a small batch 100-200 ms more, and a window's final
 * result waits for the batch that closes it (docs/benchmarks.md).
 *
 * Bounded: a task that meets a row of more than rowBytes (key, value and headers) or
 * more than taskBytes in all stops carrying; the blob then says overflow and holds no
 * rows, and the caller sends the whole batch the workers' way. So the driver never holds
 * more than taskBytes per task.
 *
 * Rows in: Spark's Kafka source's (with its headers); this class picks key, value,
 * partition, offset, the timestamp in microseconds (ts_us) and headers itself, so that
 * Python builds nothing per batch but the call.
 *
 * Blob out, big-endian: byte overflow (1: no rows follow); int rows, then each: int
 * partition, long offset, byte 1 and long ts_us (or byte 0: null), key and value (int
 * length, -1 for null, then the bytes), int headers (-1 for null), then each: key (its
 * UTF-8 bytes) and value, as above.
 */
package brewstream;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;

import static org.apache.spark.sql.functions.col;
import static org.apache.spark.sql.functions.unix_micros;

public final class CarryRows {
    private CarryRows() {}

    /** What one task returns. */
    static final class Part implements Serializable {
        private static final long serialVersionUID = 1L;
        byte[] rows = new byte[0];
        int count;
        boolean overflow;
    }

    /** The batch's rows: the blob described above, handed over through path (Blobs.handOver). */
    public static Object collect(Dataset<Row> rows, long rowBytes, long taskBytes, String path) {
        return Blobs.handOver(blob(rows, rowBytes, taskBytes), path);
    }

    private static byte[] blob(Dataset<Row> rows, long rowBytes, long taskBytes) {
        List<Part> parts = rows.select(col("key"), col("value"), col("partition"), col("offset"),
                        unix_micros(col("timestamp")).as("ts_us"), col("headers"))
                .queryExecution().toRdd().toJavaRDD()
                .mapPartitions((Iterator<InternalRow> it) -> List.of(task(it, rowBytes, taskBytes)).iterator())
                .collect();
        boolean overflow = false;
        int count = 0;
        long size = 0;
        for (Part part : parts) {
            overflow |= part.overflow;
            count += part.count;
            size += part.rows.length;
        }
        try {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream(overflow ? 8 : (int) Math.min(size + 8, 1L << 30));
            DataOutputStream out = new DataOutputStream(bytes);
            out.writeByte(overflow ? 1 : 0);
            out.writeInt(overflow ? 0 : count);
            if (!overflow) {
                for (Part part : parts) out.write(part.rows);
            }
            out.flush();
            return bytes.toByteArray();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static Part task(Iterator<InternalRow> rows, long rowBytes, long taskBytes) {
        Part part = new Part();
        ByteArrayOutputStream buffer = new ByteArrayOutputStream();
        DataOutputStream out = new DataOutputStream(buffer);
        try {
            while (rows.hasNext()) {
                InternalRow row = rows.next();
                byte[] key = row.isNullAt(0) ? null : row.getBinary(0);
                byte[] value = row.isNullAt(1) ? null : row.getBinary(1);
                ArrayData headers = row.isNullAt(5) ? null : row.getArray(5);
                long size = length(key) + length(value);
                if (headers != null) {
                    for (int i = 0; i < headers.numElements(); i++) {
                        if (headers.isNullAt(i)) continue;
                        InternalRow h = headers.getStruct(i, 2);
                        size += (h.isNullAt(0) ? 0 : h.getUTF8String(0).numBytes()) + (h.isNullAt(1) ? 0 : h.getBinary(1).length);
                    }
                }
                if (size > rowBytes || buffer.size() + size > taskBytes) {
                    part.overflow = true;  // the whole batch goes the workers' way
                    part.count = 0;
                    part.rows = new byte[0];
                    return part;
                }
                out.writeInt(row.getInt(2));
                out.writeLong(row.getLong(3));
                if (row.isNullAt(4)) {
                    out.writeByte(0);
                } else {
                    out.writeByte(1);
                    out.writeLong(row.getLong(4));
                }
                Blobs.writeBytes(out, key);
                Blobs.writeBytes(out, value);
                if (headers == null) {
                    out.writeInt(-1);
                } else {
                    out.writeInt(headers.numElements());
                    for (int i = 0; i < headers.numElements(); i++) {
                        InternalRow h = headers.isNullAt(i) ? null : headers.getStruct(i, 2);
                        Blobs.writeBytes(out, h == null || h.isNullAt(0) ? null : h.getUTF8String(0).getBytes());
                        Blobs.writeBytes(out, h == null || h.isNullAt(1) ? null : h.getBinary(1));
                    }
                }
                part.count++;
            }
            out.flush();
            part.rows = buffer.toByteArray();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return part;
    }

    private static long length(byte[] b) { return b == null ? 0 : b.length; }
}
