/*
 * The local file system (file:) as Hadoop's own, but for how a file's permissions are set:
 * with a system call, where Hadoop's own forks a chmod process (it has no native library
 * here). Spark's checkpoint sets them on every file it writes and on its checksum, so
 * each micro-batch forked four chmods from a JVM of a gigabyte, 10-15 ms of every batch
 * (docs/benchmarks.md). What is set is the same; only modes Java's POSIX permissions cannot
 * say (setuid, setgid, sticky) and file systems without them take Hadoop's way.
 *
 * A session on this machine uses it by default (spark.hadoop.fs.file.impl,
 * service/spark/session.py); any value a user sets for that key wins.
 */
package brewstream;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

public final class LocalFiles extends LocalFileSystem {
    public LocalFiles() { super(new Raw()); }

    /** Hadoop's raw local file system, with setPermission as a system call. */
    public static final class Raw extends RawLocalFileSystem {
        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            Set<PosixFilePermission> posix = posix(permission.toShort());
            if (posix == null) {
                super.setPermission(p, permission);
                return;
            }
            try {
                Files.setPosixFilePermissions(pathToFile(p).toPath(), posix);
            } catch (UnsupportedOperationException e) {
                super.setPermission(p, permission);
            }
        }
    }

    private static final PosixFilePermission[] BITS = {
        PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
        PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
        PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
    };

    /** A mode's permission bits, or null for a mode with bits beyond them. */
    static Set<PosixFilePermission> posix(int mode) {
        if ((mode & ~0777) != 0) return null;
        Set<PosixFilePermission> out = EnumSet.noneOf(PosixFilePermission.class);
        for (int bit = 0; bit < BITS.length; bit++) {
            if ((mode & (1 << bit)) != 0) out.add(BITS[bit]);
        }
        return out;
    }
}
