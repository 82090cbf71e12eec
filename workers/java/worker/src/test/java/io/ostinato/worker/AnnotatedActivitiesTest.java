package io.ostinato.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class AnnotatedActivitiesTest {
    private final JsonPayloadConverter converter = new JsonPayloadConverter();

    public static class Payments {
        ActivityContext seen;

        @ActivityMethod(name = "charge")
        public String charge(String order, ActivityContext ctx, List<Integer> cents) {
            seen = ctx;
            return order + ":" + cents.stream().mapToInt(Integer::intValue).sum();
        }

        @ActivityMethod
        public void refund(String order) {
            throw ApplicationFailure.newNonRetryableFailure("no refunds for " + order, "NoRefunds");
        }
    }

    @Test
    void argumentsAreDecodedIntoTheDeclaredGenericTypesAndTheContextIsPassed() throws Exception {
        Payments impl = new Payments();
        Map<String, Activity> activities = AnnotatedActivities.of(impl);
        assertEquals(List.of("charge", "refund"), activities.keySet().stream().sorted().toList());
        ActivityContext ctx = new Attempt(null, null, converter, new Failures(converter));
        Object result = activities.get("charge").execute(ctx,
                new ActivityInput(converter.toPayloads("o-1", List.of(1, 2, 3)), converter));
        assertEquals("o-1:6", result);
        assertSame(ctx, impl.seen);
    }

    @Test
    void theActivitysOwnExceptionComesThroughUnwrapped() {
        Activity refund = AnnotatedActivities.of(new Payments()).get("refund");
        ApplicationFailure failure = assertThrows(ApplicationFailure.class,
                () -> refund.execute(null, new ActivityInput(converter.toPayloads("o-2"), converter)));
        assertEquals("NoRefunds", failure.getType());
    }

    @Test
    void anUndecodableArgumentIsARetryableConversionFailure() {
        Activity charge = AnnotatedActivities.of(new Payments()).get("charge");
        ApplicationFailure failure = assertThrows(ApplicationFailure.class,
                () -> charge.execute(null, new ActivityInput(converter.toPayloads("o-1", "not a list"), converter)));
        assertEquals("PayloadConversionError", failure.getType());
    }

    @Test
    void aClassWithoutActivitiesIsRefused() {
        assertThrows(IllegalArgumentException.class, () -> AnnotatedActivities.of(new Object()));
    }
}
