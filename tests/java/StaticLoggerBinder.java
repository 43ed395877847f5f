// The Kafka client's own warnings and errors on stderr, which tests/helpers/java.py keeps
// and puts in every failure it reports ("retrying ... Error: NOT_ENOUGH_REPLICAS", "could
// not be established"): why a producer waits is then in the evidence, not only that it
// waits. kafka-clients logs through slf4j 1.7, which binds to the class
// org.slf4j.impl.StaticLoggerBinder; without one it drops everything (the NOP logger).

package org.slf4j.impl;

import java.lang.reflect.Proxy;
import java.util.Arrays;
import org.slf4j.ILoggerFactory;
import org.slf4j.Logger;
import org.slf4j.Marker;
import org.slf4j.helpers.FormattingTuple;
import org.slf4j.helpers.MessageFormatter;
import org.slf4j.spi.LoggerFactoryBinder;

public final class StaticLoggerBinder implements LoggerFactoryBinder {
    /** Read by slf4j 1.7's version check. */
    public static String REQUESTED_API_VERSION = "1.7.36";

    private static final StaticLoggerBinder SINGLETON = new StaticLoggerBinder();

    public static StaticLoggerBinder getSingleton() {
        return SINGLETON;
    }

    private final ILoggerFactory factory = StaticLoggerBinder::stderrLogger;

    @Override
    public ILoggerFactory getLoggerFactory() {
        return factory;
    }

    @Override
    public String getLoggerFactoryClassStr() {
        return StaticLoggerBinder.class.getName();
    }

    /** A Logger whose warn and error calls print one line each (with a throwable's
     *  one-line summary); every other level is off, as before. */
    private static Logger stderrLogger(String name) {
        String shortName = name.substring(name.lastIndexOf('.') + 1);
        return (Logger) Proxy.newProxyInstance(
                Logger.class.getClassLoader(), new Class<?>[] {Logger.class},
                (proxy, method, args) -> {
                    String called = method.getName();
                    boolean shown = called.startsWith("warn") || called.startsWith("error")
                            || called.equals("isWarnEnabled") || called.equals("isErrorEnabled");
                    if (called.equals("getName")) {
                        return name;
                    }
                    if (called.startsWith("is")) {
                        return shown;
                    }
                    if (shown && args != null) {
                        print(called.toUpperCase(), shortName, args);
                    }
                    return null;
                });
    }

    private static void print(String level, String logger, Object[] args) {
        int first = args[0] instanceof Marker ? 1 : 0;
        String format = String.valueOf(args[first]);
        Object[] rest = Arrays.copyOfRange(args, first + 1, args.length);
        if (rest.length == 1 && rest[0] instanceof Object[]) {
            rest = (Object[]) rest[0]; // the varargs overload
        }
        FormattingTuple message = MessageFormatter.arrayFormat(format, rest);
        StringBuilder line = new StringBuilder(level).append(' ').append(logger).append(": ")
                .append(message.getMessage());
        Throwable thrown = message.getThrowable();
        if (thrown != null) {
            line.append(" (").append(thrown).append(')');
        }
        System.err.println(line.toString().replace('\n', ' '));
    }
}
