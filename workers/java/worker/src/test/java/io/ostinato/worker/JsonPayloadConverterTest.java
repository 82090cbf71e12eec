package io.ostinato.worker;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.fasterxml.jackson.core.type.TypeReference;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;

/** The bytes sdk/converter.py writes for the same values, and what it reads back. */
class JsonPayloadConverterTest {
    private final JsonPayloadConverter converter = new JsonPayloadConverter();

    record Charge(String order, double amount) {
    }

    @Test
    void nullBytesAndJsonHaveTheirEncodings() {
        Payload none = converter.toPayload(null);
        assertEquals("binary/null", none.encoding());
        assertEquals(0, none.data().length);
        Payload raw = converter.toPayload(new byte[] {1, 2});
        assertEquals("binary/plain", raw.encoding());
        assertArrayEquals(new byte[] {1, 2}, raw.data());
        Payload text = converter.toPayload("ok");
        assertEquals("json/plain", text.encoding());
        assertEquals("\"ok\"", utf8(text.data()));
    }

    @Test
    void jsonIsCompactUtf8AsPythonWritesIt() {
        // json.dumps(..., ensure_ascii=False, separators=(",", ":")): no spaces, non-ASCII as UTF-8.
        Map<String, Object> value = new TreeMap<>(Map.of("a", 1, "b", List.of(true, "é"), "c", 2.5));
        assertEquals("{\"a\":1,\"b\":[true,\"é\"],\"c\":2.5}", utf8(converter.toPayload(value).data()));
        assertEquals("{\"order\":\"o-1\",\"amount\":42.5}", utf8(converter.toPayload(new Charge("o-1", 42.5)).data()));
    }

    @Test
    void readsTypesGenericsAndIgnoresUnknownFields() {
        Payload payload = json("{\"order\":\"o-1\",\"amount\":3,\"added_later\":true}");
        assertEquals(new Charge("o-1", 3.0), converter.fromPayload(payload, Charge.class));
        List<Charge> list = converter.fromPayload(json("[{\"order\":\"x\",\"amount\":1.5}]"),
                new TypeReference<List<Charge>>() { }.getType());
        assertEquals(List.of(new Charge("x", 1.5)), list);
        assertNull(converter.fromPayload(converter.toPayload(null), Charge.class));
    }

    @Test
    void nonFiniteNumbersAndUnknownEncodingsAreRefused() {
        assertThrows(RuntimeException.class, () -> converter.toPayload(Double.NaN));
        assertThrows(RuntimeException.class, () -> converter.toPayload(List.of(Double.POSITIVE_INFINITY)));
        Payload zipped = new Payload(Map.of("encoding", "binary/zlib".getBytes(StandardCharsets.UTF_8)), new byte[0]);
        assertThrows(PayloadConversionException.class, () -> converter.fromPayload(zipped, String.class));
        assertThrows(PayloadConversionException.class, () -> converter.fromPayload(json("[1"), String.class));
    }

    private static Payload json(String text) {
        return new Payload(Map.of("encoding", "json/plain".getBytes(StandardCharsets.UTF_8)),
                text.getBytes(StandardCharsets.UTF_8));
    }

    private static String utf8(byte[] data) {
        return new String(data, StandardCharsets.UTF_8);
    }
}
