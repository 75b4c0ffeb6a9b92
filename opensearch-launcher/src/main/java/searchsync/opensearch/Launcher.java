package searchsync.opensearch;

import org.opensearch.analysis.common.CommonAnalysisPlugin;
import org.opensearch.common.logging.LogConfigurator;
import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.index.mapper.MapperExtrasPlugin;
import org.opensearch.index.reindex.ReindexPlugin;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.plugins.Plugin;
import org.opensearch.transport.Netty4Plugin;

import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.Properties;
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
 * Runs a single-node OpenSearch 2.19 cluster in-process, from plain Maven jars.
 *
 * <p>Usage: {@code java -cp 'target/classes:target/lib/*' searchsync.opensearch.Launcher [--port N] [--home DIR]}
 * <br>Environment: {@code OPENSEARCH_PORT} (default 9200), {@code OPENSEARCH_HOME} (default: a fresh
 * temporary directory that is deleted again on exit). The transport port is http port + 100.
 *
 * <p>Further plugins (such as the security plugin, whose zip the start script unpacks and puts on
 * the classpath) are named by their {@code plugin-descriptor.properties}: {@code --plugin-descriptor FILE}
 * (repeatable) or {@code OPENSEARCH_PLUGIN_DESCRIPTORS} (a {@code :}-separated list); the launcher
 * loads the descriptor's {@code classname} from the classpath. Node settings beyond the ones below
 * come from {@code config/opensearch.yml} in the home, which OpenSearch reads itself.
 */
public final class Launcher {

    /** The modules that a distribution would load from modules/, loaded from the classpath instead. */
    static final List<Class<? extends Plugin>> PLUGINS = List.of(
        Netty4Plugin.class,
        CommonAnalysisPlugin.class,
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
        int port = parsePort(System.getenv().getOrDefault("OPENSEARCH_PORT", "9200"));
        String homeArg = System.getenv("OPENSEARCH_HOME");
        List<String> descriptors = new ArrayList<>();
        String envDescriptors = System.getenv("OPENSEARCH_PLUGIN_DESCRIPTORS");
        if (envDescriptors != null) {
            for (String d : envDescriptors.split(":")) {
                if (!d.isBlank()) {
                    descriptors.add(d);
                }
            }
        }
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--port" -> port = parsePort(need(args, ++i));
                case "--home" -> homeArg = need(args, ++i);
                case "--plugin-descriptor" -> descriptors.add(need(args, ++i));
                case "-h", "--help" -> {
                    System.out.println("usage: Launcher [--port HTTP_PORT] [--home DIR] [--plugin-descriptor FILE]...  (env OPENSEARCH_PORT, OPENSEARCH_HOME, OPENSEARCH_PLUGIN_DESCRIPTORS)");
                    return;
                }
                default -> throw new IllegalArgumentException("unknown argument: " + args[i]);
            }
        }

        final boolean tempHome = homeArg == null || homeArg.isBlank();
        final Path home = tempHome
            ? Files.createTempDirectory("searchsync-opensearch-")
            : Paths.get(homeArg).toAbsolutePath();
        Files.createDirectories(home.resolve("modules"));
        Files.createDirectories(home.resolve("plugins"));
        Files.createDirectories(home.resolve("config"));
        Files.createDirectories(home.resolve("data"));
        Files.createDirectories(home.resolve("logs"));

        Settings settings = Settings.builder()
            .put("cluster.name", "searchsync")
            .put("node.name", "searchsync-node")
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

        // Logging comes from log4j2.xml on the classpath (console, INFO); OpenSearch's own
        // LogConfigurator would need a config/log4j2.properties inside path.home.
        LogConfigurator.setNodeName("searchsync-node");

        Environment environment = InternalSettingsPreparer.prepareEnvironment(
            settings, Map.of(), home.resolve("config"), () -> "searchsync-node");
        List<Class<? extends Plugin>> plugins = new ArrayList<>(PLUGINS);
        for (String d : descriptors) {
            plugins.add(pluginClass(Paths.get(d)));
        }
        Node node = new EmbeddedNode(environment, plugins);

        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                System.out.println("[launcher] stopping OpenSearch node");
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
        }, "opensearch-launcher-shutdown"));

        long t0 = System.nanoTime();
        try {
            node.start();
        } catch (Throwable t) {
            System.err.println("[launcher] OpenSearch failed to start: " + t);
            t.printStackTrace();
            System.exit(1); // runs the shutdown hook, which closes the node
        }
        System.out.printf("[launcher] OpenSearch started in %.1fs: http://127.0.0.1:%d (transport %d, home %s)%n",
            (System.nanoTime() - t0) / 1e9, port, port + 100, home);
        stopped.await();
    }

    /** Loads the plugin class named by a plugin-descriptor.properties (its jars must be on the classpath). */
    private static Class<? extends Plugin> pluginClass(Path descriptor) throws IOException {
        Properties p = new Properties();
        try (InputStream in = Files.newInputStream(descriptor)) {
            p.load(in);
        }
        String name = p.getProperty("classname", "").trim();
        if (name.isEmpty()) {
            throw new IllegalArgumentException(descriptor + ": no classname");
        }
        try {
            Class<?> c = Class.forName(name, true, Launcher.class.getClassLoader());
            System.out.println("[launcher] plugin " + p.getProperty("name", "?") + " " + p.getProperty("version", "?") + ": " + name);
            return c.asSubclass(Plugin.class);
        } catch (ClassNotFoundException e) {
            throw new IllegalArgumentException(descriptor + ": class " + name + " is not on the classpath", e);
        }
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
