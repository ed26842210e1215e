/*
 * The JVM's half of counting orders: proves an order clean and counts it, or says nothing.
 *
 * gate(value, maxNameBytes) returns the quantity per drink of an order it can prove clean,
 * and null for anything else, which then takes the Python path (count_plain, then
 * count_drinks in service/drink_count/orders.py) for its count or its DLQ reason. So the
 * gate never defines what a valid order is: it accepts a subset that needs no judgement,
 * and counts it as count_drinks would.
 *
 * Clean here means: a JSON object with exactly the keys order_id, shop_id and items, each
 * once, in any order; ids are strings; items is a non-empty array of objects with exactly
 * the keys drink and quantity, each once; drink is a string of 1..maxNameBytes characters
 * and quantity an integer from 1 to 2^31-1 written with digits only (no sign, fraction or
 * exponent). Every string is printable ASCII (0x20-0x7E) without a backslash, so there are
 * no escapes to undo, no surrogates and no multi-byte characters, and a character is a
 * byte. JSON whitespace may surround any token. A drink named twice in one order is
 * summed, as count_drinks sums it.
 *
 * tests/integration/test_order_gate.py checks, through this class itself, that on any bytes,
 * any JSON, near-valid orders and every one-byte edit of clean orders it never returns
 * counts for what count_drinks refuses and always returns the same counts, and that the
 * project's own orders pass it.
 */
package brewstream;

import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.api.java.UDF2;

public final class OrderGate implements UDF2<byte[], Integer, Map<String, Long>> {
    private static final long MAX_QUANTITY = 2147483647L;

    /** As Spark calls it: brew_order_gate(value, maxNameBytes). */
    @Override
    public Map<String, Long> call(byte[] value, Integer maxNameBytes) {
        return value == null || maxNameBytes == null ? null : gate(value, maxNameBytes);
    }

    public static Map<String, Long> gate(byte[] b, int maxName) {
        try {
            return new Scan(b, maxName).order();
        } catch (Reject r) {
            return null;
        }
    }

    /** Anything the gate cannot prove clean; one instance without a stack trace, so a
     *  refusal costs no allocation. */
    private static final class Reject extends Exception {
        private static final Reject INSTANCE = new Reject();
        private Reject() { super(null, null, false, false); }
    }

    private static final class Scan {
        private final byte[] b;
        private final int maxName;
        private int i;

        Scan(byte[] b, int maxName) { this.b = b; this.maxName = maxName; }

        Map<String, Long> order() throws Reject {
            boolean orderId = false, shopId = false;
            Map<String, Long> counts = null;
            ws(); expect('{');
            do {
                ws();
                String key = string(0, Integer.MAX_VALUE);
                ws(); expect(':'); ws();
                switch (key) {
                    case "order_id": if (orderId) throw Reject.INSTANCE; orderId = true; string(0, Integer.MAX_VALUE); break;
                    case "shop_id": if (shopId) throw Reject.INSTANCE; shopId = true; string(0, Integer.MAX_VALUE); break;
                    case "items": if (counts != null) throw Reject.INSTANCE; counts = items(); break;
                    default: throw Reject.INSTANCE;
                }
                ws();
            } while (next() == ',');
            if (b[i - 1] != '}') throw Reject.INSTANCE;
            ws();
            if (i != b.length || !orderId || !shopId || counts == null) throw Reject.INSTANCE;
            return counts;
        }

        private Map<String, Long> items() throws Reject {
            Map<String, Long> counts = new HashMap<>(4);
            expect('['); ws();
            do {
                ws();
                String drink = null;
                long qty = -1;
                expect('{');
                do {
                    ws();
                    String key = string(0, Integer.MAX_VALUE);
                    ws(); expect(':'); ws();
                    if (key.equals("drink") && drink == null) drink = string(1, maxName);
                    else if (key.equals("quantity") && qty < 0) qty = quantity();
                    else throw Reject.INSTANCE;
                    ws();
                } while (next() == ',');
                if (b[i - 1] != '}' || drink == null || qty < 0) throw Reject.INSTANCE;
                counts.merge(drink, qty, Long::sum);
                ws();
            } while (next() == ',');
            if (b[i - 1] != ']') throw Reject.INSTANCE;
            return counts;
        }

        /** A string of printable ASCII without escapes, of min..max characters. */
        private String string(int min, int max) throws Reject {
            expect('"');
            int start = i;
            while (true) {
                if (i >= b.length) throw Reject.INSTANCE;
                byte c = b[i];
                if (c == '"') break;
                if (c < 0x20 || c > 0x7e || c == '\\') throw Reject.INSTANCE;
                i++;
            }
            int n = i - start;
            i++;
            if (n < min || n > max) throw Reject.INSTANCE;
            return new String(b, start, n, java.nio.charset.StandardCharsets.ISO_8859_1);
        }

        /** 1 .. 2^31-1, digits only, no leading zero. */
        private long quantity() throws Reject {
            if (i >= b.length || b[i] < '1' || b[i] > '9') throw Reject.INSTANCE;
            long v = 0;
            int digits = 0;
            while (i < b.length && b[i] >= '0' && b[i] <= '9') {
                if (++digits > 10) throw Reject.INSTANCE;
                v = v * 10 + (b[i++] - '0');
            }
            if (v > MAX_QUANTITY) throw Reject.INSTANCE;
            return v;
        }

        private void ws() {
            while (i < b.length && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r')) i++;
        }

        private void expect(char c) throws Reject {
            if (i >= b.length || b[i] != c) throw Reject.INSTANCE;
            i++;
        }

        private byte next() throws Reject {
            if (i >= b.length) throw Reject.INSTANCE;
            return b[i++];
        }
    }
}
