"""Files: the Hadoop FileSystem API through the Spark JVM (one code path for hdfs:// and file://), and listing."""
