"""The py4j glue on real JVM exceptions: a Java exception is recognised by its class, also wrapped or remote."""

from __future__ import annotations

import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from py4j.protocol import Py4JJavaError

from spark_resources.bulk import driver_bulk
from spark_resources.py4j import cached, hadoop_conf, is_java_error, java_cause, jvm


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


def test_what_is_made_once_per_jvm_is_made_once_when_threads_ask_together(spark):
    """Batches run in threads; the driver's bulk helper must be compiled once per JVM (a second class of the same name
    has py4j call its objects with the first one's methods): `cached` makes a value once, whichever threads ask."""
    made, started = [], threading.Barrier(8)

    def make():
        made.append(threading.get_ident())
        time.sleep(0.2)  # long enough for every other thread to ask meanwhile
        return object()

    def ask(_):
        started.wait()
        return cached(spark, key, make)

    key = f"once-{uuid.uuid4().hex}"
    with ThreadPoolExecutor(8) as pool:
        values = list(pool.map(ask, range(8)))
    assert len(made) == 1 and all(v is values[0] for v in values)


def test_the_driver_bulk_helper_answers_from_any_thread(spark, tmp_path):
    with ThreadPoolExecutor(4) as pool:
        uris = list(pool.map(lambda name: driver_bulk(spark).pathUris(json.dumps([f"{tmp_path}/{name} x"])), "abcd"))
    assert [json.loads(u) for u in uris] == [[f"{tmp_path}/{name}%20x"] for name in "abcd"]


def test_py4j_connections_send_their_answers_at_once(spark):
    """py4j leaves Nagle's algorithm on, so an answer over 8 KB waited 40 ms for Python's delayed acknowledgement: a
    session's connections, and the one a new thread opens afterwards, have it off (TCP_NODELAY)."""

    def no_delay_of_this_threads_connection() -> bool:
        java = jvm(spark)
        thread, fields = java.java.lang.Thread.currentThread(), java.java.lang.Class.forName("java.lang.Thread")
        try:  # the Runnable a thread runs: `target` up to Java 17, `holder.task` since
            target = fields.getDeclaredField("target")
            target.setAccessible(True)
            connection = target.get(thread)
        except Py4JJavaError:
            holder = fields.getDeclaredField("holder")
            holder.setAccessible(True)
            task = holder.get(thread).getClass().getDeclaredField("task")
            task.setAccessible(True)
            connection = task.get(holder.get(thread))
        return bool(connection.getSocket().getTcpNoDelay())

    assert no_delay_of_this_threads_connection()
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(no_delay_of_this_threads_connection).result()
