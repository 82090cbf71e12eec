package io.ostinato.worker;

/** A value cannot become a payload, or a payload cannot become the requested type. */
public final class PayloadConversionException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public PayloadConversionException(String message) {
        super(message);
    }

    public PayloadConversionException(String message, Throwable cause) {
        super(message, cause);
    }
}
