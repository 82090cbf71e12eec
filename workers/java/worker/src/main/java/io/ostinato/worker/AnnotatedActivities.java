package io.ostinato.worker;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.lang.reflect.Type;
import java.util.LinkedHashMap;
import java.util.Map;

/** Turns the {@link ActivityMethod}s of an object into {@link Activity}s, by reflection, once at registration. */
final class AnnotatedActivities {
    private AnnotatedActivities() {
    }

    static Map<String, Activity> of(Object implementation) {
        Map<String, Activity> out = new LinkedHashMap<>();
        for (Method method : implementation.getClass().getMethods()) {
            ActivityMethod mark = method.getAnnotation(ActivityMethod.class);
            if (mark == null) {
                continue;
            }
            if (Modifier.isStatic(method.getModifiers())) {
                throw new IllegalArgumentException("@ActivityMethod " + method + " must not be static");
            }
            String name = mark.name().isEmpty() ? method.getName() : mark.name();
            if (out.put(name, bind(implementation, method)) != null) {
                throw new IllegalArgumentException("two activities are named " + name + " in "
                        + implementation.getClass().getName());
            }
        }
        if (out.isEmpty()) {
            throw new IllegalArgumentException(implementation.getClass().getName()
                    + " has no public method annotated @ActivityMethod");
        }
        return out;
    }

    private static Activity bind(Object target, Method method) {
        method.trySetAccessible();  // a public method of a nested, non-public class
        Type[] types = method.getGenericParameterTypes();
        Class<?>[] raw = method.getParameterTypes();
        return (ctx, input) -> {
            Object[] args = new Object[types.length];
            int next = 0;
            for (int i = 0; i < types.length; i++) {
                if (raw[i] == ActivityContext.class) {
                    args[i] = ctx;
                } else {
                    try {
                        args[i] = input.get(next++, types[i]);
                    } catch (PayloadConversionException e) {
                        throw ApplicationFailure.newFailure("cannot decode argument " + (next - 1) + " of activity "
                                + method.getName() + ": " + e.getMessage(), "PayloadConversionError").withCause(e);
                    }
                    if (args[i] == null && raw[i].isPrimitive()) {
                        throw ApplicationFailure.newFailure("argument " + (next - 1) + " of activity "
                                + method.getName() + " is missing or null, but its type is " + raw[i],
                                "PayloadConversionError");
                    }
                }
            }
            try {
                return method.invoke(target, args);
            } catch (InvocationTargetException e) {
                Throwable cause = e.getCause();
                if (cause instanceof Exception ex) {
                    throw ex;
                }
                throw e;
            }
        };
    }
}
