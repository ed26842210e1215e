/*
 * What the driver JVM does with an exception that ends one of its threads.
 *
 * Java's default prints "Exception in thread ..." and the whole stack trace to stderr,
 * which is the daemon's log. A SIGTERM to the process group (systemd's stop, `kill --
 * -PGID`) reaches Spark's JVM while brewstream stops its query, and the JVM's shutdown
 * hook stops the SparkContext under the query's own thread; that thread then ends on
 * "RpcEnv already stopped" as it reports the query's end. Such an end is the stop itself:
 * it goes to Spark's log file only. Anything else is logged as one line on stderr (the
 * trace in the file), as every other Spark warning is (service/spark/conf/log4j2.properties).
 */
package brewstream;

import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Set;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

public final class JvmUncaught {
    private static final Logger FAILED = LogManager.getLogger("brewstream.uncaught");
    private static final Logger STOPPED = LogManager.getLogger("brewstream.uncaught.stopped");
    private static final String RPC_STOPPED = "org.apache.spark.rpc.RpcEnvStoppedException";

    private JvmUncaught() {}

    /** Replaces the JVM's default handler; the session builder calls it once per JVM. */
    public static void install() {
        Thread.setDefaultUncaughtExceptionHandler(JvmUncaught::report);
    }

    public static void report(Thread thread, Throwable error) {
        if (endedByAStop(error)) {
            STOPPED.info("thread \"{}\" ended as Spark stopped: {}", thread.getName(), error.toString(), error);
        } else {
            FAILED.warn("thread \"{}\" ended with {}", thread.getName(), error.toString(), error);
        }
    }

    /** Whether Spark's RPC had already stopped: the cause, somewhere down the chain. Each
     *  cause is looked at once: two exceptions can name each other as their cause. */
    public static boolean endedByAStop(Throwable error) {
        Set<Throwable> seen = Collections.newSetFromMap(new IdentityHashMap<>());
        for (Throwable cause = error; cause != null && seen.add(cause); cause = cause.getCause()) {
            if (cause.getClass().getName().equals(RPC_STOPPED)) return true;
        }
        return false;
    }
}
