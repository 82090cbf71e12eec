package io.ostinato.worker;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;

/**
 * One user value as the engine carries it ({@code ostinato.Payload}): opaque {@code data} and byte
 * {@code metadata}, whose {@code encoding} says how to read the data. The engine never decodes it.
 */
public record Payload(Map<String, byte[]> metadata, byte[] data) {
    public static final String ENCODING = "encoding";

    public Payload {
        metadata = Map.copyOf(metadata);
    }

    /** The {@code encoding} metadata as text, or null when there is none. */
    public String encoding() {
        byte[] value = metadata.get(ENCODING);
        return value == null ? null : new String(value, StandardCharsets.UTF_8);
    }

    /** Bytes this payload costs on the wire, measured as the engine measures its limits. */
    public int size() {
        int size = data.length;
        for (Map.Entry<String, byte[]> e : metadata.entrySet()) {
            size += e.getKey().getBytes(StandardCharsets.UTF_8).length + e.getValue().length;
        }
        return size;
    }

    GenericRecord toRecord() {
        Schema schema = Schemas.get().schema("ostinato.Payload");
        Map<String, ByteBuffer> meta = new HashMap<>();
        metadata.forEach((k, v) -> meta.put(k, ByteBuffer.wrap(v)));
        return new GenericRecordBuilder(schema).set("metadata", meta).set("data", ByteBuffer.wrap(data)).build();
    }

    static Payload fromRecord(GenericRecord record) {
        Map<String, byte[]> meta = new HashMap<>();
        Map<?, ?> raw = (Map<?, ?>) record.get("metadata");
        raw.forEach((k, v) -> meta.put(k.toString(), bytes((ByteBuffer) v)));
        return new Payload(meta, bytes((ByteBuffer) record.get("data")));
    }

    static byte[] bytes(ByteBuffer buffer) {
        ByteBuffer copy = buffer.duplicate();
        byte[] out = new byte[copy.remaining()];
        copy.get(out);
        return out;
    }
}
