package io.ostinato.worker;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.ArrayList;
import java.util.List;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;

/** Java exceptions as {@code ostinato.Failure} records, in the shape the Python SDK decodes (sdk/data.py). */
final class Failures {
    static final String SOURCE = "ostinato-java";
    /** How deep a cause chain is recorded, as in the Python SDK. */
    static final int MAX_CAUSE_DEPTH = 20;

    private final JsonPayloadConverter converter;
    private final Schema schema = Schemas.get().schema("ostinato.Failure");

    Failures(JsonPayloadConverter converter) {
        this.converter = converter;
    }

    GenericRecord encode(Throwable error) {
        return encode(error, 0);
    }

    private GenericRecord encode(Throwable error, int depth) {
        GenericRecordBuilder record = new GenericRecordBuilder(schema)
                .set("message", error.getMessage() != null ? error.getMessage() : error.getClass().getName())
                .set("kind", new GenericData.EnumSymbol(schema.getField("kind").schema(), "APPLICATION"))
                .set("type", error.getClass().getSimpleName())
                .set("source", SOURCE)
                .set("stack_trace", stackTrace(error));
        if (error instanceof ApplicationFailure failure) {
            record.set("type", failure.getType() != null ? failure.getType() : "ApplicationFailure")
                    .set("non_retryable", failure.isNonRetryable())
                    .set("details", payloads(failure.getDetails()))
                    .set("next_retry_delay_ms",
                            failure.getNextRetryDelay() == null ? null : failure.getNextRetryDelay().toMillis());
        }
        Throwable cause = error.getCause();
        if (cause != null && cause != error && depth < MAX_CAUSE_DEPTH) {
            record.set("cause", encode(cause, depth + 1));
        }
        return record.build();
    }

    List<GenericRecord> payloads(List<?> values) {
        List<GenericRecord> out = new ArrayList<>(values.size());
        for (Object value : values) {
            out.add(converter.toPayload(value == ApplicationFailure.NullDetail.INSTANCE ? null : value).toRecord());
        }
        return out;
    }

    private static String stackTrace(Throwable error) {
        StringWriter out = new StringWriter();
        // Only this throwable's frames: the causes carry their own.
        for (StackTraceElement frame : error.getStackTrace()) {
            out.append("\tat ").append(frame.toString()).append('\n');
        }
        return out.toString();
    }

    /** For logs: the whole trace with causes. */
    static String describe(Throwable error) {
        StringWriter out = new StringWriter();
        error.printStackTrace(new PrintWriter(out));
        return out.toString();
    }
}
