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

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.api.java.UDF2;

public final class OrderGate implements UDF2<byte[], Integer, Map<String, Long>> {
    private static final long MAX_QUANTITY = 2147483647L;
    private static final byte[] ORDER_ID = ascii("order_id"), SHOP_ID = ascii("shop_id"), ITEMS = ascii("items"),
            DRINK = ascii("drink"), QUANTITY = ascii("quantity");

    /** As Spark calls it: brew_order_gate(value, maxNameBytes). */
    @Override
    public Map<String, Long> call(byte[] value, Integer maxNameBytes) {
        return value == null || maxNameBytes == null ? null : gate(value, maxNameBytes);
    }

    public static Map<String, Long> gate(byte[] b, int maxName) {
        Scan scan = new Scan(maxName);
        if (!scan.clean(b)) return null;
        Map<String, Long> counts = new HashMap<>(4);
        for (int k = 0; k < scan.items; k++) counts.merge(scan.drink(k), scan.quantity[k], Long::sum);
        return counts;
    }

    private static byte[] ascii(String s) { return s.getBytes(StandardCharsets.US_ASCII); }

    /** Anything the gate cannot prove clean; one instance without a stack trace, so a
     *  refusal costs no allocation. */
    private static final class Reject extends Exception {
        private static final Reject INSTANCE = new Reject();
        private Reject() { super(null, null, false, false); }
    }

    /**
     * One scanner, reused order after order (GateTotals keeps one per task's group): it
     * creates no object per order. Keys are compared as bytes, ids are only checked, and a
     * clean order's items are left as (where its drink name is in the value, its quantity),
     * for the caller to count; they are whole only once clean() returned true, so nothing of
     * an order that turns out unclean is ever counted.
     */
    static final class Scan {
        private final int maxName;
        private byte[] b;
        private int i;
        int items;
        int[] drinkStart = new int[4];
        int[] drinkLength = new int[4];
        long[] quantity = new long[4];

        Scan(int maxName) { this.maxName = maxName; }

        /** Whether value is a clean order; if so, its items are in items, drinkStart, ... */
        boolean clean(byte[] value) {
            b = value;
            i = 0;
            items = 0;
            try {
                order();
                return true;
            } catch (Reject r) {
                return false;
            }
        }

        String drink(int k) { return new String(b, drinkStart[k], drinkLength[k], StandardCharsets.ISO_8859_1); }

        private void order() throws Reject {
            boolean orderId = false, shopId = false, items = false;
            ws(); expect('{');
            do {
                ws();
                int key = string(0, Integer.MAX_VALUE);
                int keyLength = i - 1 - key;
                ws(); expect(':'); ws();
                if (is(key, keyLength, ORDER_ID)) {
                    if (orderId) throw Reject.INSTANCE;
                    orderId = true;
                    string(0, Integer.MAX_VALUE);
                } else if (is(key, keyLength, SHOP_ID)) {
                    if (shopId) throw Reject.INSTANCE;
                    shopId = true;
                    string(0, Integer.MAX_VALUE);
                } else if (is(key, keyLength, ITEMS)) {
                    if (items) throw Reject.INSTANCE;
                    items = true;
                    items();
                } else {
                    throw Reject.INSTANCE;
                }
                ws();
            } while (next() == ',');
            if (b[i - 1] != '}') throw Reject.INSTANCE;
            ws();
            if (i != b.length || !orderId || !shopId || !items) throw Reject.INSTANCE;
        }

        private void items() throws Reject {
            expect('['); ws();
            do {
                ws();
                int drink = -1, drinkLength = 0;
                long qty = -1;
                expect('{');
                do {
                    ws();
                    int key = string(0, Integer.MAX_VALUE);
                    int keyLength = i - 1 - key;
                    ws(); expect(':'); ws();
                    if (is(key, keyLength, DRINK) && drink < 0) {
                        drink = string(1, maxName);
                        drinkLength = i - 1 - drink;
                    } else if (is(key, keyLength, QUANTITY) && qty < 0) {
                        qty = quantity();
                    } else {
                        throw Reject.INSTANCE;
                    }
                    ws();
                } while (next() == ',');
                if (b[i - 1] != '}' || drink < 0 || qty < 0) throw Reject.INSTANCE;
                add(drink, drinkLength, qty);
                ws();
            } while (next() == ',');
            if (b[i - 1] != ']') throw Reject.INSTANCE;
        }

        private void add(int drink, int length, long qty) {
            if (items == quantity.length) {
                drinkStart = java.util.Arrays.copyOf(drinkStart, items * 2);
                drinkLength = java.util.Arrays.copyOf(drinkLength, items * 2);
                quantity = java.util.Arrays.copyOf(quantity, items * 2);
            }
            drinkStart[items] = drink;
            drinkLength[items] = length;
            quantity[items++] = qty;
        }

        private boolean is(int start, int length, byte[] key) {
            return length == key.length && java.util.Arrays.equals(b, start, start + length, key, 0, length);
        }

        /** A string of printable ASCII without escapes, of min..max characters: where its
         *  characters start (they end before the closing quote, at i - 1). */
        private int string(int min, int max) throws Reject {
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
            return start;
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
