// The local Hadoop of spark_resources/hadoop.py: Hadoop's own MiniDFSCluster and, with --nodemanagers N > 0, its
// MiniYARNCluster (a ResourceManager and N NodeManagers) in this one JVM, until SIGTERM stops them in order.
// Run by `java` from source (JEP 330) with the minicluster jar on the classpath. Arguments:
//   --ready FILE          written (atomically, as JSON) once every DataNode and NodeManager has registered
//   --namenode-port P     the NameNode's RPC port          --datanodes N     DataNodes (1)
//   --format              format a new filesystem           --nodemanagers N  NodeManagers (0: HDFS only)
//   --spark-jars DIR --spark-archive PATH   Spark's jars zipped once to PATH on HDFS (world-readable, for YARN's
//                                           shared cache), unless PATH exists
//   -D KEY=VALUE          a setting (repeatable)
// Settings also come from core-site.xml and capacity-scheduler.xml first on the classpath.

import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.zip.Deflater;
import java.util.zip.ZipEntry;
import java.util.zip.ZipOutputStream;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.server.common.HdfsServerConstants.StartupOption;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.server.resourcemanager.ResourceManager;
import org.apache.hadoop.yarn.webapp.util.WebAppUtils;

public class LocalHadoopCluster {
    public static void main(String[] args) throws Exception {
        Configuration conf = new HdfsConfiguration();
        String ready = null, sparkJars = null, sparkArchive = null;
        int namenodePort = 0, datanodes = 1, nodemanagers = 0;
        boolean format = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--ready" -> ready = args[++i];
                case "--namenode-port" -> namenodePort = Integer.parseInt(args[++i]);
                case "--datanodes" -> datanodes = Integer.parseInt(args[++i]);
                case "--nodemanagers" -> nodemanagers = Integer.parseInt(args[++i]);
                case "--format" -> format = true;
                case "--spark-jars" -> sparkJars = args[++i];
                case "--spark-archive" -> sparkArchive = args[++i];
                case "-D" -> {
                    String[] pair = args[++i].split("=", 2);
                    conf.set(pair[0], pair[1]);
                }
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        MiniDFSCluster dfs = new MiniDFSCluster.Builder(conf)
                .nameNodePort(namenodePort)
                .numDataNodes(datanodes)
                .format(format)
                .startupOption(format ? StartupOption.FORMAT : StartupOption.REGULAR)
                .build();
        dfs.waitActive();
        FileSystem.setDefaultUri(conf, dfs.getFileSystem().getUri());
        MiniYARNCluster yarn = null;
        Map<String, String> state = new TreeMap<>();
        state.put("namenode_port", String.valueOf(dfs.getNameNodePort()));
        if (sparkArchive != null) {
            stageSparkJars(dfs.getFileSystem(), new File(sparkJars), new org.apache.hadoop.fs.Path(sparkArchive));
        }
        if (nodemanagers > 0) {
            yarn = new MiniYARNCluster("lakekeeper", 1, nodemanagers, 1, 1) {
                @Override
                protected ResourceManager createResourceManager() {
                    return new WebAppOnAFreePort();
                }
            };
            yarn.init(conf);
            yarn.start();
            if (!yarn.waitForNodeManagersToConnect(60_000)) {
                throw new IllegalStateException(nodemanagers + " NodeManager(s) did not register within 60 s");
            }
            for (Map.Entry<String, String> entry : yarn.getConfig()) {
                if (entry.getKey().startsWith("yarn.resourcemanager.") && entry.getKey().endsWith("address")) {
                    state.put(entry.getKey(), yarn.getConfig().get(entry.getKey()));
                }
            }
        }
        MiniYARNCluster yarnToStop = yarn;
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            if (yarnToStop != null) {
                yarnToStop.stop(); // the NodeManagers end their containers
            }
            dfs.shutdown();
        }));
        writeReady(Path.of(ready), state);
        Thread.currentThread().join();
    }

    /**
     * The minicluster's ResourceManager (no keytab login of its own), its web app on a free port chosen before it
     * starts: the ResourceManager takes its web proxy's address (the applications' tracking URLs,
     * http://HOST:PORT/proxy/APPLICATION_ID/) from its settings once, before its web app binds, so with the
     * minicluster's ephemeral port 0 every tracking URL would name port 0.
     */
    static class WebAppOnAFreePort extends ResourceManager {
        @Override
        protected void doSecureLogin() {
        }

        @Override
        protected void serviceInit(Configuration conf) throws Exception {
            try (ServerSocket probe = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
                WebAppUtils.setRMWebAppHostnameAndPort(conf, MiniYARNCluster.getHostname(), probe.getLocalPort());
            }
            super.serviceInit(conf);
        }
    }

    /** Every jar of `jars` in one zip at `archive` (stored, not compressed: jars are), readable by all. */
    static void stageSparkJars(FileSystem fs, File jars, org.apache.hadoop.fs.Path archive) throws IOException {
        if (fs.exists(archive)) {
            return;
        }
        org.apache.hadoop.fs.Path partial = archive.suffix(".partial");
        File[] files = jars.listFiles((dir, name) -> name.endsWith(".jar"));
        if (files == null || files.length == 0) {
            throw new IOException("no jars in " + jars);
        }
        try (OutputStream out = fs.create(partial, true); ZipOutputStream zip = new ZipOutputStream(out)) {
            zip.setLevel(Deflater.NO_COMPRESSION);
            for (File jar : files) {
                zip.putNextEntry(new ZipEntry(jar.getName()));
                Files.copy(jar.toPath(), zip);
                zip.closeEntry();
            }
        }
        fs.setPermission(partial, new FsPermission((short) 0644));
        for (org.apache.hadoop.fs.Path dir = archive.getParent(); dir != null && !dir.isRoot(); dir = dir.getParent()) {
            fs.setPermission(dir, new FsPermission((short) 0755));
        }
        fs.rename(partial, archive);
    }

    static void writeReady(Path ready, Map<String, String> state) throws IOException {
        List<String> pairs = new ArrayList<>();
        state.forEach((key, value) -> pairs.add("\"" + key + "\": \"" + value + "\""));
        Path partial = ready.resolveSibling(ready.getFileName() + ".partial");
        Files.writeString(partial, "{" + String.join(", ", pairs) + "}\n");
        Files.move(partial, ready, StandardCopyOption.ATOMIC_MOVE);
    }
}
