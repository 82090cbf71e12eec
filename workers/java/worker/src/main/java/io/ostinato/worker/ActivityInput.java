package io.ostinato.worker;

import java.lang.reflect.Type;
import java.util.List;

/**
 * The arguments the workflow passed (one payload each), decoded when asked for, into the type the activity
 * names: a missing argument reads as null, as an unset optional would.
 */
public final class ActivityInput {
    private final List<Payload> payloads;
    private final JsonPayloadConverter converter;

    ActivityInput(List<Payload> payloads, JsonPayloadConverter converter) {
        this.payloads = List.copyOf(payloads);
        this.converter = converter;
    }

    /** How many arguments were passed. */
    public int size() {
        return payloads.size();
    }

    /** Argument {@code index} as {@code type} (a class, or a generic type such as {@code List<Item>}). */
    public <T> T get(int index, Type type) {
        if (index >= payloads.size()) {
            return null;
        }
        return converter.fromPayload(payloads.get(index), type);
    }

    /** The first argument as {@code type}. */
    public <T> T get(Class<T> type) {
        return get(0, type);
    }

    /** The payloads as they came, for activities that read them themselves. */
    public List<Payload> payloads() {
        return payloads;
    }
}
