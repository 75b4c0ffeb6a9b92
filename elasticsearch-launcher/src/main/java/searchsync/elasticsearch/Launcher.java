package searchsync.elasticsearch;

import org.elasticsearch.common.logging.LogConfigurator;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;
import org.elasticsearch.index.mapper.MapperExtrasPlugin;
import org.elasticsearch.reindex.ReindexPlugin;
import org.elasticsearch.node.InternalSettingsPreparer;
import org.elasticsearch.node.Node;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.transport.Netty4Plugin;

import java.io.IOException;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * Runs a single-node Elasticsearch 7.17 cluster in-process, from the jars on Maven Central
 * (the server jar and the modules published as {@code *-client} artifacts).
 *
 * <p>Usage: {@code java -cp 'target/classes:target/lib/*' searchsync.elasticsearch.Launcher [--port N] [--home DIR]}
 * <br>Environment: {@code ELASTICSEARCH_PORT} (default 9210), {@code ELASTICSEARCH_HOME} (default: a fresh
 * temporary directory that is deleted again on exit). The transport port is http port + 100.
 */
public final class Launcher {

    /** The modules that a distribution would load from modules/, loaded from the classpath instead. */
    static final List<Class<? extends Plugin>> PLUGINS = List.of(
        Netty4Plugin.class,
        ReindexPlugin.class,
        MapperExtrasPlugin.class
    );

    /** Node's plugin-taking constructor is protected, hence this small subclass. */
    static final class EmbeddedNode extends Node {
        EmbeddedNode(Environment environment, Collection<Class<? extends Plugin>> plugins) {
            super(environment, plugins, true);
        }
    }

    private Launcher() {}

    public static void main(String[] args) throws Exception {
        int port = parsePort(System.getenv().getOrDefault("ELASTICSEARCH_PORT", "9210"));
        String homeArg = System.getenv("ELASTICSEARCH_HOME");
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--port" -> port = parsePort(need(args, ++i));
                case "--home" -> homeArg = need(args, ++i);
                case "-h", "--help" -> {
                    System.out.println("usage: Launcher [--port HTTP_PORT] [--home DIR]  (env ELASTICSEARCH_PORT, ELASTICSEARCH_HOME)");
                    return;
                }
                default -> throw new IllegalArgumentException("unknown argument: " + args[i]);
            }
        }

        final boolean tempHome = homeArg == null || homeArg.isBlank();
        final Path home = tempHome
            ? Files.createTempDirectory("searchsync-elasticsearch-")
            : Paths.get(homeArg).toAbsolutePath();
        for (String d : List.of("modules", "plugins", "config", "data", "logs")) {
            Files.createDirectories(home.resolve(d));
        }

        Settings settings = Settings.builder()
            .put("cluster.name", "searchsync-es")
            .put("node.name", "searchsync-es-node")
            .put("path.home", home.toString())
            .put("path.data", home.resolve("data").toString())
            .put("path.logs", home.resolve("logs").toString())
            .put("discovery.type", "single-node")
            .put("network.host", "127.0.0.1")
            .put("http.port", port)
            .put("transport.port", port + 100)
            .put("cluster.routing.allocation.disk.threshold_enabled", false)
            .put("action.auto_create_index", true)
            .build();

        // Logging comes from log4j2.xml on the classpath (console, INFO).
        LogConfigurator.setNodeName("searchsync-es-node");

        Environment environment = InternalSettingsPreparer.prepareEnvironment(
            settings, Map.of(), home.resolve("config"), () -> "searchsync-es-node");
        Node node = new EmbeddedNode(environment, PLUGINS);

        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                System.out.println("[launcher] stopping Elasticsearch node");
                node.close();
                if (!node.awaitClose(20, TimeUnit.SECONDS)) {
                    System.out.println("[launcher] node did not close within 20s");
                }
            } catch (Exception e) {
                System.err.println("[launcher] error while closing node: " + e);
            } finally {
                if (tempHome) {
                    deleteQuietly(home);
                }
                System.out.println("[launcher] stopped");
                org.apache.logging.log4j.LogManager.shutdown();
                stopped.countDown();
            }
        }, "elasticsearch-launcher-shutdown"));

        long t0 = System.nanoTime();
        try {
            node.start();
        } catch (Throwable t) {
            System.err.println("[launcher] Elasticsearch failed to start: " + t);
            t.printStackTrace();
            System.exit(1); // runs the shutdown hook, which closes the node
        }
        System.out.printf("[launcher] Elasticsearch started in %.1fs: http://127.0.0.1:%d (transport %d, home %s)%n",
            (System.nanoTime() - t0) / 1e9, port, port + 100, home);
        stopped.await();
    }

    private static String need(String[] args, int i) {
        if (i >= args.length) {
            throw new IllegalArgumentException("missing value for " + args[i - 1]);
        }
        return args[i];
    }

    private static int parsePort(String s) {
        int p = Integer.parseInt(s.trim());
        if (p < 1 || p > 65535 - 100) {
            throw new IllegalArgumentException("bad port: " + s);
        }
        return p;
    }

    private static void deleteQuietly(Path dir) {
        try {
            Files.walkFileTree(dir, new SimpleFileVisitor<>() {
                @Override
                public FileVisitResult visitFile(Path file, BasicFileAttributes attrs) throws IOException {
                    Files.deleteIfExists(file);
                    return FileVisitResult.CONTINUE;
                }

                @Override
                public FileVisitResult postVisitDirectory(Path d, IOException exc) throws IOException {
                    Files.deleteIfExists(d);
                    return FileVisitResult.CONTINUE;
                }
            });
        } catch (IOException e) {
            System.err.println("[launcher] could not delete " + dir + ": " + e);
        }
    }
}
