package io.ostinato.worker;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;

/**
 * Avro single-object encoding ({@code C3 01}, CRC-64-AVRO fingerprint, body), the encoding of every Ostinato
 * record. Avro's own message classes compute the fingerprint from the schema's Parsing Canonical Form, which is
 * what the Python side writes, so the two languages read each other's bytes.
 */
public final class Codec {
    private final Schemas schemas;
    private final Map<Schema, BinaryMessageEncoder<GenericRecord>> encoders = new ConcurrentHashMap<>();
    private final Map<String, BinaryMessageDecoder<GenericRecord>> decoders = new ConcurrentHashMap<>();

    public Codec(Schemas schemas) {
        this.schemas = schemas;
    }

    /** The record's single-object bytes, written with its own (today's) schema. */
    public byte[] encode(GenericRecord record) {
        BinaryMessageEncoder<GenericRecord> encoder = encoders.computeIfAbsent(record.getSchema(),
                s -> new BinaryMessageEncoder<>(GenericData.get(), s));
        try {
            ByteBuffer buffer = encoder.encode(record);
            byte[] out = new byte[buffer.remaining()];
            buffer.get(out);
            return out;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * Decode bytes written with any released version of {@code fullName}, resolved to today's schema.
     *
     * @throws WireException when the bytes are not such a record (wrong magic, unknown writer, corrupt body)
     */
    public GenericRecord decode(String fullName, byte[] bytes) {
        BinaryMessageDecoder<GenericRecord> decoder = decoders.computeIfAbsent(fullName, this::decoderFor);
        try {
            return decoder.decode(bytes);
        } catch (IOException | RuntimeException e) {
            throw new WireException("not a readable " + fullName + ": " + e.getMessage(), e);
        }
    }

    private BinaryMessageDecoder<GenericRecord> decoderFor(String fullName) {
        BinaryMessageDecoder<GenericRecord> decoder =
                new BinaryMessageDecoder<>(GenericData.get(), schemas.schema(fullName));
        for (Schema writer : schemas.releasedVersions(fullName)) {
            decoder.addSchema(writer);
        }
        return decoder;
    }
}
