package io.ostinato.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import org.apache.avro.generic.GenericRecord;
import org.junit.jupiter.api.Test;

/** Failures carry what the engine acts on and what the Python workflow decodes into ApplicationError. */
class FailuresTest {
    private final Failures failures = new Failures(new JsonPayloadConverter());

    @Test
    void anApplicationFailureKeepsTypeRetryabilityDetailsAndDelay() {
        GenericRecord record = failures.encode(ApplicationFailure.newNonRetryableFailure("card declined",
                "CardDeclined", "o-1", null).withNextRetryDelay(Duration.ofMillis(1500)));
        assertEquals("card declined", record.get("message").toString());
        assertEquals("APPLICATION", record.get("kind").toString());
        assertEquals("CardDeclined", record.get("type").toString());
        assertEquals("ostinato-java", record.get("source").toString());
        assertEquals(true, record.get("non_retryable"));
        assertEquals(1500L, record.get("next_retry_delay_ms"));
        List<?> details = (List<?>) record.get("details");
        assertEquals(2, details.size());
        assertEquals("\"o-1\"", new String(Payload.fromRecord((GenericRecord) details.get(0)).data(),
                StandardCharsets.UTF_8));
        assertEquals("binary/null", Payload.fromRecord((GenericRecord) details.get(1)).encoding());
    }

    @Test
    void anyOtherExceptionIsARetryableFailureNamedByItsClassWithItsCauses() {
        GenericRecord record = failures.encode(new IllegalStateException("outer", new ArithmeticException("inner")));
        assertEquals("IllegalStateException", record.get("type").toString());
        assertEquals(false, record.get("non_retryable"));
        assertNull(record.get("next_retry_delay_ms"));
        GenericRecord cause = (GenericRecord) record.get("cause");
        assertEquals("ArithmeticException", cause.get("type").toString());
        assertEquals("inner", cause.get("message").toString());
    }
}
