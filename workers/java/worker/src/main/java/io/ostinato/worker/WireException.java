package io.ostinato.worker;

/** Bytes from Kafka that are not the record the contract promises; the worker logs and skips them. */
public final class WireException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public WireException(String message, Throwable cause) {
        super(message, cause);
    }
}
