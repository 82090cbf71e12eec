package io.ostinato.worker;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.junit.jupiter.api.Test;

/** Java writes and reads the bytes the Python side writes and reads (schemas/README.md, byte by byte). */
class CodecTest {
    private final Schemas schemas = Schemas.get();
    private final Codec codec = new Codec(schemas);

    @Test
    void fingerprintsAndCanonicalFormsAreTheReleasedOnes() throws Exception {
        JsonNode released;
        try (InputStream in = Schemas.resource("released.json")) {
            released = new ObjectMapper().readTree(in);
        }
        for (String name : List.of("ostinato.command.Command", "ostinato.task.ActivityTask", "ostinato.reply.Reply",
                "ostinato.Failure", "ostinato.Payload")) {
            Schema schema = schemas.schema(name);
            JsonNode entry = released.get(HexFormat.of().formatHex(fingerprint(schema)));
            assertNotNull(entry, name + ": Java's fingerprint is not one the project released (schemas/release.py)");
            assertEquals(name, entry.get("name").asText());
            assertEquals(entry.get("canonical").asText(), SchemaNormalization.toParsingForm(schema), name);
        }
    }

    /** The 8 header bytes: CRC-64-AVRO of the canonical form, little-endian, as released.json keys them. */
    private static byte[] fingerprint(Schema schema) {
        return ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN)
                .putLong(SchemaNormalization.parsingFingerprint64(schema)).array();
    }

    @Test
    void theReadmeCompletionIsWrittenByteForByte() {
        GenericRecord task = new GenericRecordBuilder(schemas.schema("ostinato.task.ActivityTask"))
                .set("namespace", "default").set("workflow_id", "order-1").set("run_id", "4f1c")
                .set("workflow_type", "Order").set("activity_id", "1").set("activity_type", "charge")
                .set("task_queue", "orders").set("scheduled_event_id", 5L).set("attempt", 1)
                .set("scheduled_time_ms", 0L).set("current_attempt_scheduled_time_ms", 0L)
                .set("start_to_close_timeout_ms", 1000L).build();
        GenericRecord body = Engine.body("RespondActivityTaskCompleted", task)
                .set("result", List.of(new JsonPayloadConverter().toPayload("ok").toRecord())).build();
        GenericRecord command = new GenericRecordBuilder(schemas.schema("ostinato.command.Command"))
                .set("namespace", "default").set("workflow_id", "order-1").set("run_id", "4f1c")
                .set("request_id", "r-1").set("identity", "worker-7").set("time_ms", 1764400000000L)
                .set("reply_partition", null).set("body", body).build();
        byte[] bytes = codec.encode(command);
        String body64 = "0e64656661756c74 0e6f726465722d31 0834663163 06722d31 10776f726b65722d37 80b0fbe6d966 00 10"
                + " 0a 02 02 0210656e636f64696e67 146a736f6e2f706c61696e 00 08226f6b22 00 00 00";
        byte[] expected = HexFormat.of().parseHex(body64.replace(" ", ""));
        assertEquals(85, bytes.length);
        assertArrayEquals(new byte[] {(byte) 0xc3, 0x01}, Arrays.copyOf(bytes, 2));
        assertArrayEquals(fingerprint(schemas.schema("ostinato.command.Command")), Arrays.copyOfRange(bytes, 2, 10));
        assertArrayEquals(expected, Arrays.copyOfRange(bytes, 10, bytes.length));

        GenericRecord back = codec.decode("ostinato.command.Command", bytes);
        assertEquals("order-1", back.get("workflow_id").toString());
        GenericRecord completed = (GenericRecord) back.get("body");
        assertEquals("RespondActivityTaskCompleted", completed.getSchema().getName());
        Payload result = Payload.fromRecord((GenericRecord) ((List<?>) completed.get("result")).get(0));
        assertEquals("ok", new JsonPayloadConverter().fromPayload(result, String.class));
    }

    @Test
    void bytesThatAreNotARecordAreRefused() {
        assertThrows(WireException.class, () -> codec.decode("ostinato.task.ActivityTask", new byte[] {1, 2, 3}));
        byte[] unknownWriter = new byte[12];
        unknownWriter[0] = (byte) 0xc3;
        unknownWriter[1] = 0x01;
        assertThrows(WireException.class, () -> codec.decode("ostinato.task.ActivityTask", unknownWriter));
    }
}
