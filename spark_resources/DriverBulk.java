import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

/**
 * Work the Python driver would otherwise do with a py4j round trip per value: every file of a batch, every partition
 * of a batch, in one call. Compiled in the driver's JVM at first use by Janino (in Spark's jars: no JDK, no build
 * step; `spark_resources/bulk.py`), so the source keeps to what Janino compiles: no lambdas, raw collections.
 * Arguments and results are JSON text or plain Java objects; nothing here decides anything the Python side does not.
 * Also here: `noDelay`, which makes py4j's own connections send their answers at once.
 */
public class DriverBulk {
    private final ObjectMapper mapper = new ObjectMapper();

    /** Turns Nagle's algorithm off on the sockets of py4j's connections, now and to come (py4j leaves it on: a
     * response over 8 KB went out in two writes, the second held until Python's delayed acknowledgement of the
     * first, 40 ms later). Called through py4j, so on the thread of the caller's connection, which leads to the
     * server and its other connections. Returns the number of connections set (0: not a py4j client-server
     * connection, nothing done). */
    public int noDelay() throws Exception {
        Object connection = threadTarget(Thread.currentThread());
        if (!(connection instanceof py4j.ClientServerConnection)) {
            return 0;
        }
        java.lang.reflect.Field serverField = py4j.ClientServerConnection.class.getDeclaredField("javaServer");
        serverField.setAccessible(true);
        py4j.GatewayServer server = (py4j.GatewayServer) serverField.get(connection);
        server.addListener(new NoDelayListener());
        java.lang.reflect.Field connectionsField = py4j.GatewayServer.class.getDeclaredField("connections");
        connectionsField.setAccessible(true);
        List connections;
        synchronized (connectionsField.get(server)) {
            connections = new ArrayList((List) connectionsField.get(server));
        }
        for (int i = 0; i < connections.size(); i++) {
            ((py4j.Py4JServerConnection) connections.get(i)).getSocket().setTcpNoDelay(true);
        }
        return connections.size();
    }

    /** The Runnable a thread runs: `target` up to Java 17, `holder.task` since. */
    private static Object threadTarget(Thread thread) throws Exception {
        try {
            java.lang.reflect.Field target = Thread.class.getDeclaredField("target");
            target.setAccessible(true);
            return target.get(thread);
        } catch (NoSuchFieldException e) {
            java.lang.reflect.Field holderField = Thread.class.getDeclaredField("holder");
            holderField.setAccessible(true);
            Object holder = holderField.get(thread);
            java.lang.reflect.Field task = holder.getClass().getDeclaredField("task");
            task.setAccessible(true);
            return task.get(holder);
        }
    }

    /** Sets each new py4j connection's socket to send at once. */
    public static class NoDelayListener extends py4j.DefaultGatewayServerListener {
        public void connectionStarted(py4j.Py4JServerConnection connection) {
            try {
                connection.getSocket().setTcpNoDelay(true);
            } catch (java.net.SocketException e) {
                // a connection closed as it started: nothing to send on
            }
        }
    }

    /** Each file's footer, in order; for the first file that cannot be read {"path", "error"}, and the files after
     * it are not read. A Parquet file: {"path", "metadata": ParquetMetadata.toJSON, "schema": its MessageType as
     * text}. An ORC file: {"path", "rows", "columns" (top-level names), "stripes" as [rows, bytes], "compression",
     * "schema" (text), "writer" [file version, writer version, software version], "user_metadata" as [name, base64
     * value]}. */
    public String footers(Configuration conf, String format, String pathsJson) throws Exception {
        List paths = (List) mapper.readValue(pathsJson, List.class);
        List out = new ArrayList();
        for (int i = 0; i < paths.size(); i++) {
            String path = (String) paths.get(i);
            Map file = new LinkedHashMap();
            file.put("path", path);
            out.add(file);
            try {
                if ("parquet".equals(format)) {
                    parquetFooter(conf, new Path(path), file);
                } else {
                    orcTail(conf, new Path(path), file);
                }
            } catch (Throwable e) {  // a corrupt tail can throw an Error (a bogus length): that file is unreadable
                file.put("error", cause(e));
                break;
            }
        }
        return mapper.writeValueAsString(out);
    }

    private static void parquetFooter(Configuration conf, Path path, Map file) throws Exception {
        org.apache.parquet.hadoop.metadata.ParquetMetadata footer =
            org.apache.parquet.hadoop.ParquetFileReader.readFooter(conf, path);
        file.put("metadata", org.apache.parquet.hadoop.metadata.ParquetMetadata.toJSON(footer));
        file.put("schema", footer.getFileMetaData().getSchema().toString());
    }

    private static void orcTail(Configuration conf, Path path, Map file) throws Exception {
        org.apache.orc.Reader reader =
            org.apache.orc.OrcFile.createReader(path, org.apache.orc.OrcFile.readerOptions(conf));
        try {
            org.apache.orc.TypeDescription schema = reader.getSchema();
            file.put("rows", Long.valueOf(reader.getNumberOfRows()));
            file.put("columns", schema.getFieldNames());
            List stripes = new ArrayList();
            List infos = reader.getStripes();
            for (int s = 0; s < infos.size(); s++) {
                org.apache.orc.StripeInformation stripe = (org.apache.orc.StripeInformation) infos.get(s);
                List pair = new ArrayList();
                pair.add(Long.valueOf(stripe.getNumberOfRows()));
                pair.add(Long.valueOf(stripe.getLength()));
                stripes.add(pair);
            }
            file.put("stripes", stripes);
            file.put("compression", reader.getCompressionKind().name());
            file.put("schema", schema.toString());
            List writer = new ArrayList();
            writer.add(reader.getFileVersion().getName());
            writer.add(reader.getWriterVersion().name());
            writer.add(reader.getSoftwareVersion());
            file.put("writer", writer);
            List user = new ArrayList();
            List keys = reader.getMetadataKeys();
            for (int k = 0; k < keys.size(); k++) {
                String key = (String) keys.get(k);
                ByteBuffer value = (ByteBuffer) reader.getMetadataValue(key).duplicate();
                byte[] bytes = new byte[value.remaining()];
                value.get(bytes);
                List entry = new ArrayList();
                entry.add(key);
                entry.add(Base64.getEncoder().encodeToString(bytes));
                user.add(entry);
            }
            file.put("user_metadata", user);
        } finally {
            reader.close();
        }
    }

    /** Each path's {"mode" (as FsPermission.toShort(): permission bits and sticky bit), "owner", "group",
     * "extended" (an ACL beyond the permission bits)}: on the local filesystem from the operating system (Java's
     * `unix:` attributes, through a symbolic link as Hadoop's status does), where Hadoop's local status forks `ls`
     * for them; elsewhere from
     * getFileStatus. A missing path fails the call. */
    public String attributes(org.apache.hadoop.fs.FileSystem fs, String pathsJson) throws Exception {
        List paths = (List) mapper.readValue(pathsJson, List.class);
        boolean local = "file".equals(fs.getScheme());
        List out = new ArrayList();
        for (int i = 0; i < paths.size(); i++) {
            Path path = fs.makeQualified(new Path((String) paths.get(i)));
            Map found = new LinkedHashMap();
            if (local) {
                Map unix = java.nio.file.Files.readAttributes(
                    java.nio.file.Paths.get(path.toUri()), "unix:mode,owner,group", new java.nio.file.LinkOption[0]);
                found.put("mode", Integer.valueOf(((Integer) unix.get("mode")).intValue() & 01777));
                found.put("owner", ((java.security.Principal) unix.get("owner")).getName());
                found.put("group", ((java.security.Principal) unix.get("group")).getName());
                found.put("extended", Boolean.FALSE);
            } else {
                org.apache.hadoop.fs.FileStatus status = fs.getFileStatus(path);
                found.put("mode", Integer.valueOf(status.getPermission().toShort()));
                found.put("owner", status.getOwner());
                found.put("group", status.getGroup());
                found.put("extended", Boolean.valueOf(status.hasAcl()));
            }
            out.add(found);
        }
        return mapper.writeValueAsString(out);
    }

    /** Each directory's subdirectories with their modification times (ms), one listing a directory: {directory:
     * [[name, mtime], ...]}, null for a directory that does not exist or cannot be listed (its units are then
     * listed themselves). */
    public String childTimes(Configuration conf, String directoriesJson) throws Exception {
        List directories = (List) mapper.readValue(directoriesJson, List.class);
        Map out = new LinkedHashMap();
        for (int i = 0; i < directories.size(); i++) {
            String directory = (String) directories.get(i);
            Path path = new Path(directory);
            org.apache.hadoop.fs.FileStatus[] children;
            try {
                children = path.getFileSystem(conf).listStatus(path);
            } catch (java.io.IOException e) {  // missing, or not readable (another team's parent directory)
                out.put(directory, null);
                continue;
            }
            List found = new ArrayList();
            for (int j = 0; j < children.length; j++) {
                if (children[j].isDirectory()) {
                    List child = new ArrayList();
                    child.add(children[j].getPath().getName());
                    child.add(Long.valueOf(children[j].getModificationTime()));
                    found.add(child);
                }
            }
            out.put(directory, found);
        }
        return mapper.writeValueAsString(out);
    }

    /** Each path's Hadoop URI as text (`new Path(p).toUri().toString()`: how Spark spells a file it read). */
    public String pathUris(String pathsJson) throws Exception {
        List paths = (List) mapper.readValue(pathsJson, List.class);
        List out = new ArrayList();
        for (int i = 0; i < paths.size(); i++) {
            out.add(new Path((String) paths.get(i)).toUri().toString());
        }
        return mapper.writeValueAsString(out);
    }

    /** The partitions of these specs (JSON list of {column: value}) through `source`'s
     * getPartitionOption(database, table, spec) (Spark's Hive client); null where none. */
    public List partitions(Object source, String database, String table, String specsJson) throws Exception {
        List specs = (List) mapper.readValue(specsJson, List.class);
        Method get = method(source.getClass(), "getPartitionOption", 3);
        List found = new ArrayList();
        for (int i = 0; i < specs.size(); i++) {
            scala.Option partition = (scala.Option) get.invoke(source, new Object[] {database, table, scalaMap((Map) specs.get(i))});
            found.add(partition.isEmpty() ? null : partition.get());
        }
        return found;
    }

    /** The parameters of each partition (null for a null partition), as a JSON list. */
    public String parameters(List partitions) throws Exception {
        List out = new ArrayList();
        for (int i = 0; i < partitions.size(); i++) {
            Object partition = partitions.get(i);
            out.add(partition == null ? null : javaMap(field(partition, "parameters")));
        }
        return mapper.writeValueAsString(out);
    }

    /** A Scala Seq of copies of the non-null partitions with these parameters (JSON list, in the same order). */
    public Object withParameters(List partitions, String parametersJson) throws Exception {
        List parameters = (List) mapper.readValue(parametersJson, List.class);
        List copies = new ArrayList();
        for (int i = 0; i < partitions.size(); i++) {
            if (partitions.get(i) != null) {
                copies.add(copy(partitions.get(i), "parameters", scalaMap((Map) parameters.get(i))));
            }
        }
        return scala.jdk.javaapi.CollectionConverters.asScala(copies).toSeq();
    }

    /** A Scala Seq of copies of the partitions (none null) whose storage's location is the matching URI. */
    public Object withLocations(List partitions, String locationsJson) throws Exception {
        List locations = (List) mapper.readValue(locationsJson, List.class);
        List copies = new ArrayList();
        for (int i = 0; i < partitions.size(); i++) {
            Object partition = partitions.get(i);
            Object uri = org.apache.spark.sql.catalyst.catalog.CatalogUtils.stringToURI((String) locations.get(i));
            Object storage = copy(field(partition, "storage"), "locationUri", new scala.Some(uri));
            copies.add(copy(partition, "storage", storage));
        }
        return scala.jdk.javaapi.CollectionConverters.asScala(copies).toSeq();
    }

    private static Object field(Object product, String name) {
        scala.Product fields = (scala.Product) product;
        for (int i = 0; i < fields.productArity(); i++) {
            if (name.equals(fields.productElementName(i))) {
                return fields.productElement(i);
            }
        }
        throw new IllegalArgumentException(product.getClass().getName() + " has no field " + name);
    }

    /** `product.copy(...)` with field `name` replaced, whatever the case class's arity in this Spark version. */
    private static Object copy(Object product, String name, Object value) throws Exception {
        scala.Product fields = (scala.Product) product;
        Object[] values = new Object[fields.productArity()];
        boolean replaced = false;
        for (int i = 0; i < values.length; i++) {
            replaced = replaced || name.equals(fields.productElementName(i));
            values[i] = name.equals(fields.productElementName(i)) ? value : fields.productElement(i);
        }
        if (!replaced) {
            throw new IllegalArgumentException(product.getClass().getName() + " has no field " + name);
        }
        return method(product.getClass(), "copy", values.length).invoke(product, values);
    }

    private static Method method(Class owner, String name, int arity) {
        Method[] methods = owner.getMethods();
        for (int i = 0; i < methods.length; i++) {
            if (methods[i].getName().equals(name) && methods[i].getParameterCount() == arity) {
                return methods[i];
            }
        }
        throw new IllegalArgumentException(owner.getName() + " has no method " + name + " of " + arity + " arguments");
    }

    private static Object scalaMap(Map entries) {
        return scala.collection.immutable.Map$.MODULE$.from(scala.jdk.javaapi.CollectionConverters.asScala(entries));
    }

    private static Map javaMap(Object scalaMap) {
        return new LinkedHashMap(scala.jdk.javaapi.CollectionConverters.asJava((scala.collection.Map) scalaMap));
    }

    /** The most telling message of an exception's chain: Spark's `[ERROR_CLASS] ...` where there is one, else the
     * outermost message (as `spark_resources.py4j.java_cause` picks it). */
    private static String cause(Throwable error) {
        List messages = new ArrayList();
        for (Throwable t = error; t != null && messages.size() < 20; t = t.getCause()) {
            if (t.getMessage() != null) {
                messages.add(t.getMessage());
            }
        }
        for (int i = 0; i < messages.size(); i++) {
            if (((String) messages.get(i)).startsWith("[")) {
                return (String) messages.get(i);
            }
        }
        return messages.isEmpty() ? error.toString() : (String) messages.get(0);
    }
}
