"""The driver's bulk helper: `DriverBulk.java`, compiled in the driver's JVM at first use and kept for its life; and,
compiled alike, `CopyProof.java`, which proves a byte-level concatenation by comparing the bytes it copied.

A value read through py4j costs a round trip (and a second one when Python frees the Java object), so a batch's
footers or partition copies made from Python cost hundreds of round trips a file or a partition. `DriverBulk` does
that work in the JVM and answers in JSON: a call a batch. Janino, Spark's own code-generation compiler (always in its
jars), compiles the source, so no JDK and no build step is needed wherever Spark runs. `send_at_once`, called as
each session starts, has it turn Nagle's algorithm off on py4j's sockets.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_resources.py4j import cached, gateway, java_class

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SOURCES = Path(__file__).parent  # <class name>.java

log = logging.getLogger(__name__)


def driver_bulk(spark: SparkSession) -> Any:
    """The `DriverBulk` instance of this session's JVM, compiled once per JVM (~0.4 s), whichever threads ask first:
    py4j finds a method by its class's name, so a second `DriverBulk` class in the JVM would have its objects
    called with the first one's methods (and fail)."""
    return cached(spark, "DriverBulk", lambda: _compile(spark, "DriverBulk"))


def copy_proof(spark: SparkSession) -> Any:
    """The `CopyProof` instance of this session's JVM, compiled once per JVM as `driver_bulk`'s."""
    return cached(spark, "CopyProof", lambda: _compile(spark, "CopyProof"))


def _compile(spark: SparkSession, name: str) -> Any:
    compiler = java_class(spark, "org.codehaus.janino.SimpleCompiler")()
    thread = java_class(spark, "java.lang.Thread").currentThread()
    compiler.setParentClassLoader(thread.getContextClassLoader())
    compiler.cook((SOURCES / f"{name}.java").read_text())
    found = compiler.getClassLoader().loadClass(name)
    no_types = gateway(spark).new_array(java_class(spark, "java.lang.Class"), 0)
    no_arguments = gateway(spark).new_array(java_class(spark, "java.lang.Object"), 0)
    return found.getDeclaredConstructor(no_types).newInstance(no_arguments)


def send_at_once(spark: SparkSession) -> None:
    """Turn Nagle's algorithm off on the py4j connections of this session's JVM, now and to come, once per JVM.

    py4j leaves it on: its JVM writes an answer over 8 KB (a listing, a footer, a metastore read) in two parts and
    holds the second until Python acknowledges the first, which Python's TCP delays by 40 ms: 40 ms an answer,
    measured (`DriverBulk.noDelay`). Only a matter of speed: a JVM where it cannot be done goes on as it was."""

    def turn_off() -> int:
        try:
            return int(driver_bulk(spark).noDelay())
        except Exception as error:  # another py4j, another JVM: slower answers, nothing else
            log.warning("py4j's connections keep Nagle's algorithm (answers over 8 KB wait 40 ms): %s", error)
            return 0

    cached(spark, "no delay", turn_off)
