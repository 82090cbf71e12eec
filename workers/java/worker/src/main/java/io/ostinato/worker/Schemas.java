package io.ostinato.worker;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;

/**
 * The Avro schemas of the wire contract, read from the project's {@code schemas/avro/} that the build packages
 * into this jar (never copied by hand), plus every released version of each record from {@code released.json},
 * so records written by an older engine still decode.
 */
public final class Schemas {
    /** Load order matters: a file refers to named types defined in the files before it (as schemas/codec.py). */
    static final List<String> FILES = List.of("common.avsc", "schedules.avsc", "commands.avsc", "history.avsc", "tasks.avsc",
            "visibility.avsc", "replies.avsc", "state.avsc", "cluster.avsc");
    private static final String ROOT = "/io/ostinato/avro/";
    private static final Schemas INSTANCE = load();

    private final Map<String, Schema> byName;
    private final Map<String, List<Schema>> released;

    private Schemas(Map<String, Schema> byName, Map<String, List<Schema>> released) {
        this.byName = byName;
        this.released = released;
    }

    /** The schemas packaged in this jar, parsed once. */
    public static Schemas get() {
        return INSTANCE;
    }

    /** Today's schema of a named type, e.g. {@code ostinato.command.Command}. */
    public Schema schema(String fullName) {
        Schema schema = byName.get(fullName);
        if (schema == null) {
            throw new IllegalArgumentException("no Avro type named " + fullName + " in schemas/avro");
        }
        return schema;
    }

    /** Every released version of a named type (today's included), as writer schemas for decoding. */
    public List<Schema> releasedVersions(String fullName) {
        return released.getOrDefault(fullName, List.of());
    }

    private static Schemas load() {
        Schema.Parser parser = new Schema.Parser();
        Map<String, Schema> byName = new HashMap<>();
        for (String file : FILES) {
            Schema parsed = parse(parser, file);
            // Each file is a JSON array of named types, which Avro reads as a union of them.
            List<Schema> types = parsed.getType() == Schema.Type.UNION ? parsed.getTypes() : List.of(parsed);
            for (Schema type : types) {
                byName.put(type.getFullName(), type);
            }
        }
        return new Schemas(Collections.unmodifiableMap(byName), loadReleased());
    }

    private static Schema parse(Schema.Parser parser, String file) {
        try (InputStream in = resource(file)) {
            return parser.parse(in);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read schema " + file, e);
        }
    }

    private static Map<String, List<Schema>> loadReleased() {
        Map<String, List<Schema>> out = new HashMap<>();
        try (InputStream in = resource("released.json")) {
            JsonNode root = new ObjectMapper().readTree(in);
            for (JsonNode entry : root) {
                // A canonical form is self-contained: every named type is defined at its first use.
                Schema schema = new Schema.Parser().parse(entry.get("canonical").asText());
                out.computeIfAbsent(schema.getFullName(), k -> new ArrayList<>()).add(schema);
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read released.json", e);
        }
        return out;
    }

    static InputStream resource(String file) {
        InputStream in = Schemas.class.getResourceAsStream(ROOT + file);
        if (in == null) {
            throw new IllegalStateException(ROOT + file + " is not on the class path: build with Maven, which "
                    + "packages the project's schemas/avro/ into the jar");
        }
        return in;
    }
}
