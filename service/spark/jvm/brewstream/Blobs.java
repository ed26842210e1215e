/*
 * Writing the blobs the project's JVM classes hand the driver (GateCount, CarryRows);
 * service/spark/blob.py reads them.
 */
package brewstream;

import java.io.DataOutputStream;
import java.io.IOException;

final class Blobs {
    private Blobs() {}

    /** Bytes after their length, or the length -1 for null. */
    static void writeBytes(DataOutputStream out, byte[] b) throws IOException {
        if (b == null) {
            out.writeInt(-1);
        } else {
            out.writeInt(b.length);
            out.write(b);
        }
    }
}
