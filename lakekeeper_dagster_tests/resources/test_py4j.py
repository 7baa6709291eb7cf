"""The py4j glue on real JVM exceptions: a Java exception is recognised by its class, also wrapped or remote."""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JJavaError

from spark_resources.py4j import hadoop_conf, is_java_error, java_cause, jvm


def test_a_rename_onto_an_existing_path_is_a_file_already_exists_error(spark, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    java = jvm(spark)
    fs = java.org.apache.hadoop.fs
    context = fs.FileContext.getFileContext(fs.Path(tmp_path.as_uri()).toUri(), hadoop_conf(spark))
    options = spark.sparkContext._gateway.new_array(fs.Options.Rename, 1)
    options[0] = fs.Options.Rename.NONE
    with pytest.raises(Py4JJavaError) as caught:
        context.rename(fs.Path((tmp_path / "a").as_uri()), fs.Path((tmp_path / "b").as_uri()), options)
    assert is_java_error(caught.value, "FileAlreadyExistsException")
    assert not is_java_error(caught.value, "AclException")
    assert (tmp_path / "a").is_dir() and (tmp_path / "b").is_dir()


def test_a_remote_exception_counts_as_the_class_it_carries(spark):
    """HDFS reports a NameNode-side error as `RemoteException(<class>)`, here wrapped once more, as Spark would."""
    java = jvm(spark)
    remote = java.org.apache.hadoop.ipc.RemoteException("org.apache.hadoop.fs.FileAlreadyExistsException", "exists")
    with pytest.raises(Py4JJavaError) as caught:
        java.java.util.concurrent.CompletableFuture.failedFuture(remote).get()
    assert is_java_error(caught.value, "FileAlreadyExistsException")
    assert is_java_error(caught.value, "ExecutionException")
    assert not is_java_error(caught.value, "UnsupportedOperationException")
    assert "exists" in java_cause(caught.value)
