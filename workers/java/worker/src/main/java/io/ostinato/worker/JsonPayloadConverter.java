package io.ostinato.worker;

import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JavaType;
import com.fasterxml.jackson.databind.JsonSerializer;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.SerializerProvider;
import com.fasterxml.jackson.databind.module.SimpleModule;
import java.io.IOException;
import java.lang.reflect.Type;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Ostinato's default payload converter, byte for byte as the Python SDK writes it (sdk/converter.py): null as
 * {@code binary/null} with no data, {@code byte[]} as {@code binary/plain}, anything else as compact UTF-8 JSON
 * ({@code json/plain}). NaN and infinities are refused, as Python refuses them; unknown JSON properties are
 * ignored on reading, so a worker with an older class still reads what a newer one wrote.
 */
public final class JsonPayloadConverter {
    static final String NULL = "binary/null";
    static final String BINARY = "binary/plain";
    static final String JSON = "json/plain";
    /** The engine's default hard limit for one payload (schemas/payloads.py DEFAULT_HARD_LIMIT). */
    public static final int HARD_LIMIT = 2 * 1024 * 1024;

    private final ObjectMapper mapper;

    public JsonPayloadConverter() {
        this(new ObjectMapper());
    }

    /** With an application's own mapper (modules for java.time, naming strategies...); finite numbers are kept. */
    public JsonPayloadConverter(ObjectMapper mapper) {
        SimpleModule finite = new SimpleModule("ostinato-finite-numbers");
        finite.addSerializer(Double.class, new FiniteSerializer<>());
        finite.addSerializer(Double.TYPE, new FiniteSerializer<>());
        finite.addSerializer(Float.class, new FiniteSerializer<>());
        finite.addSerializer(Float.TYPE, new FiniteSerializer<>());
        this.mapper = mapper.copy()
                .registerModule(finite)
                .disable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES)
                .disable(SerializationFeature.FAIL_ON_EMPTY_BEANS)
                .disable(SerializationFeature.INDENT_OUTPUT);
    }

    /** The mapper values go through (to build {@link JavaType}s for generic targets). */
    public ObjectMapper mapper() {
        return mapper;
    }

    public Payload toPayload(Object value) {
        if (value == null) {
            return new Payload(Map.of(Payload.ENCODING, bytes(NULL)), new byte[0]);
        }
        Payload payload;
        if (value instanceof byte[] raw) {
            payload = new Payload(Map.of(Payload.ENCODING, bytes(BINARY)), raw.clone());
        } else {
            try {
                payload = new Payload(Map.of(Payload.ENCODING, bytes(JSON)), mapper.writeValueAsBytes(value));
            } catch (JsonProcessingException e) {
                throw new PayloadConversionException("cannot convert a " + value.getClass().getName()
                        + " to JSON: " + e.getOriginalMessage(), e);
            }
        }
        if (payload.size() > HARD_LIMIT) {
            throw new PayloadConversionException("payload is " + payload.size() + " bytes, above the hard limit of "
                    + HARD_LIMIT + " bytes: store large data yourself and pass a reference to it");
        }
        return payload;
    }

    public List<Payload> toPayloads(Object... values) {
        List<Payload> out = new ArrayList<>(values.length);
        for (Object value : values) {
            out.add(toPayload(value));
        }
        return out;
    }

    /** The payload as {@code type} (a class or a generic type such as {@code List<Order>}). */
    @SuppressWarnings("unchecked")
    public <T> T fromPayload(Payload payload, Type type) {
        String encoding = payload.encoding();
        if (NULL.equals(encoding)) {
            return null;
        }
        if (BINARY.equals(encoding)) {
            if (type == byte[].class || type == Object.class) {
                return (T) payload.data().clone();
            }
            throw new PayloadConversionException("a binary/plain payload can only be read as byte[], not " + type);
        }
        if (!JSON.equals(encoding)) {
            throw new PayloadConversionException("cannot convert a payload with encoding " + encoding
                    + "; if a codec or the blob store wrote it, decode it with the same codecs first");
        }
        JavaType target = mapper.getTypeFactory().constructType(type);
        try {
            return mapper.readValue(payload.data(), target);
        } catch (IOException e) {
            throw new PayloadConversionException("cannot read payload as " + target + ": " + e.getMessage(), e);
        }
    }

    private static byte[] bytes(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }

    /** Writes a float or double as JSON only when it is finite (JSON has no NaN; other readers refuse it). */
    private static final class FiniteSerializer<N extends Number> extends JsonSerializer<N> {
        @Override
        public void serialize(N value, JsonGenerator gen, SerializerProvider provider) throws IOException {
            double d = value.doubleValue();
            if (Double.isNaN(d) || Double.isInfinite(d)) {
                throw new PayloadConversionException(value + " has no JSON form (NaN and infinities are refused)");
            }
            if (value instanceof Float f) {
                gen.writeNumber(f);
            } else {
                gen.writeNumber(d);
            }
        }
    }
}
