package io.ostinato.worker;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Marks a public method as an activity for {@link ActivityWorker#registerActivities(Object)}. Its parameters
 * are the workflow's arguments in order, decoded into their declared (generic) types; an
 * {@link ActivityContext} parameter, anywhere, receives the context instead.
 */
@Retention(RetentionPolicy.RUNTIME)
@Target(ElementType.METHOD)
public @interface ActivityMethod {
    /** The activity type the workflow names; empty means the method's name. */
    String name() default "";
}
