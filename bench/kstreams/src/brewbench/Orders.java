package brewbench;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.apache.kafka.streams.KeyValue;

/**
 * The order rules of brewstream (DESIGN.md, "order"), written the way a Kafka Streams user
 * writes them with Jackson: a JSON object with string {@code order_id} and {@code shop_id}
 * and a non-empty {@code items} list; each item an object with a non-empty string
 * {@code drink} of at most 256 UTF-8 bytes and an integer {@code quantity} from 1 to
 * 2^31-1 (booleans, floats, strings and nulls are not integers). One bad item makes the
 * whole order bad: it yields no item. A repeated key keeps its last value (Jackson's
 * default, as orjson's); text after the document, a byte order mark and unpaired
 * surrogates are refused as brewstream refuses them.
 */
final class Orders {
    static final long MAX_QUANTITY = Integer.MAX_VALUE;
    static final int MAX_NAME_BYTES = 256;
    private static final ObjectMapper MAPPER =
            new ObjectMapper().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);

    private Orders() {}

    /** The (drink, quantity) items of a good order; none for a bad one. */
    static List<KeyValue<String, Long>> items(byte[] raw) {
        if (raw == null || raw.length == 0) {
            return Collections.emptyList();
        }
        if (raw.length >= 3 && (raw[0] & 0xff) == 0xef && (raw[1] & 0xff) == 0xbb && (raw[2] & 0xff) == 0xbf) {
            return Collections.emptyList();  // a byte order mark is not JSON text
        }
        JsonNode doc;
        try {
            doc = MAPPER.readTree(raw);
        } catch (JsonProcessingException e) {
            return Collections.emptyList();
        } catch (IOException e) {
            return Collections.emptyList();
        }
        if (doc == null || !doc.isObject()) {
            return Collections.emptyList();
        }
        if (!isString(doc.get("order_id")) || !isString(doc.get("shop_id"))) {
            return Collections.emptyList();
        }
        JsonNode items = doc.get("items");
        if (items == null || !items.isArray() || items.isEmpty()) {
            return Collections.emptyList();
        }
        List<KeyValue<String, Long>> out = new ArrayList<>(items.size());
        for (JsonNode item : items) {
            if (!item.isObject()) {
                return Collections.emptyList();
            }
            JsonNode drink = item.get("drink");
            if (!isString(drink)) {
                return Collections.emptyList();
            }
            String name = drink.textValue();
            if (name.isEmpty() || name.getBytes(StandardCharsets.UTF_8).length > MAX_NAME_BYTES) {
                return Collections.emptyList();
            }
            JsonNode quantity = item.get("quantity");
            if (quantity == null || !quantity.isIntegralNumber() || !quantity.canConvertToLong()) {
                return Collections.emptyList();
            }
            long q = quantity.longValue();
            if (q < 1 || q > MAX_QUANTITY) {
                return Collections.emptyList();
            }
            out.add(KeyValue.pair(name, q));
        }
        return out;
    }

    /** A JSON string that is valid Unicode (no unpaired surrogate from a \\u escape). */
    private static boolean isString(JsonNode node) {
        if (node == null || !node.isTextual()) {
            return false;
        }
        String s = node.textValue();
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isHighSurrogate(c)) {
                if (i + 1 >= s.length() || !Character.isLowSurrogate(s.charAt(i + 1))) {
                    return false;
                }
                i++;
            } else if (Character.isLowSurrogate(c)) {
                return false;
            }
        }
        return true;
    }
}
