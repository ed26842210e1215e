/*
 * Writing the blobs the project's JVM classes hand the driver (GateCount, CarryRows);
 * service/spark/blob.py reads them.
 */
package brewstream;

import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

final class Blobs {
    private Blobs() {}

    /**
     * A blob for the driver's Python (handed_over in service/spark/blob.py): written to
     * the file at path, and its length returned; or the blob itself, when there is no path
     * or the file cannot be written. Why a file: py4j writes an answer longer than its
     * writer's 8 KiB buffer in pieces, and Nagle's algorithm holds back the second piece
     * until the first is acknowledged, which the receiver's delayed acknowledgement puts
     * off for 40 ms: every answer over about 6 KB waited that long. A file in the page
     * cache costs a fraction of a millisecond.
     */
    static Object handOver(byte[] blob, String path) {
        if (path != null) {
            try {
                Files.write(Path.of(path), blob);
                return (long) blob.length;
            } catch (IOException | RuntimeException e) {
                // A full or missing temporary folder: the blob goes the slow way, whole.
            }
        }
        return blob;
    }

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
