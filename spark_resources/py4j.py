"""All py4j glue in one place: the JVM objects behind a Spark session, Scala collections, Java exceptions, and
per-thread Spark settings (SQL conf for one operation, the description that labels a Spark job).

Everything else calls these functions instead of reaching into `spark._jvm`, `spark._jsc` or a py4j error.
"""

from __future__ import annotations

import json
import re
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOB_DESCRIPTION = "spark.job.description"


def jvm(spark: SparkSession) -> Any:
    """The py4j view of the driver JVM (`jvm.org.apache...` looks a class up: one round trip each)."""
    return spark._jvm


_CACHED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # gateway -> {key: what was looked up or made once}


_MAKING = threading.RLock()  # one thread makes a cached value; the others wait for it (`make` may look up classes)


def cached(spark: SparkSession, key: str, make: Callable[[], Any]) -> Any:
    """What `make()` returns, made once per JVM (the session's gateway) under `key`, whichever threads ask."""
    values = _CACHED.setdefault(gateway(spark), {})
    if key not in values:
        with _MAKING:
            if key not in values:
                values[key] = make()
    return values[key]


def java_class(spark: SparkSession, name: str) -> Any:
    """The JVM class (or static member) `name`, e.g. `org.apache.hadoop.fs.Path`, looked up once per JVM: through
    `jvm(spark)` each step of a name is a py4j round trip, and the hot paths of a run ask for the same few classes
    for every file and partition."""

    def look_up() -> Any:
        found = jvm(spark)
        for step in name.split("."):
            found = getattr(found, step)
        return found

    return cached(spark, f"class {name}", look_up)


def gateway(spark: SparkSession) -> Any:
    """The py4j gateway (to build Java arrays)."""
    return spark.sparkContext._gateway


def hadoop_conf(spark: SparkSession) -> Any:
    """The session's Hadoop `Configuration`."""
    return spark._jsc.hadoopConfiguration()


def external_catalog(spark: SparkSession) -> Any:
    """Spark's external (Hive) catalog, for structured table and partition metadata."""
    return spark._jsparkSession.sharedState().externalCatalog()


def scala_seq(seq: Any) -> list:
    """Python list of a Scala Seq's elements."""
    iterator = seq.iterator()
    items = []
    while iterator.hasNext():
        items.append(iterator.next())
    return items


def as_python(spark: SparkSession, value: Any, leave_out: Mapping[str, Sequence[str]] | None = None) -> Any:
    """A JVM value (Scala collections and case classes too) as Python data: serialized to JSON by Jackson with its
    Scala module (both in Spark's jars) in one call, instead of a py4j round trip per element and field.

    `leave_out` maps a JVM class name to the properties of its objects not serialized (the document is held whole
    in the JVM and in Python: leave out what can be large and is not read)."""
    key = f"as_python mapper {sorted((k, tuple(v)) for k, v in (leave_out or {}).items())}"
    mappers = _CACHED.setdefault(gateway(spark), {})
    if key not in mappers:  # a mapper learns each class it serializes once: kept for the JVM's life
        java = jvm(spark)
        mapper = java.com.fasterxml.jackson.databind.ObjectMapper()
        scala = getattr(getattr(java.com.fasterxml.jackson.module.scala, "DefaultScalaModule$"), "MODULE$")
        mapper.registerModule(scala)
        ignorals = java.com.fasterxml.jackson.annotation.JsonIgnoreProperties.Value
        for class_name, properties in (leave_out or {}).items():
            names = gateway(spark).new_array(java.java.lang.String, len(properties))
            for i, name in enumerate(properties):
                names[i] = name
            override = mapper.configOverride(java.java.lang.Class.forName(class_name))
            override.setIgnorals(ignorals.forIgnoredProperties(names))
        mappers[key] = mapper
    return json.loads(mappers[key].writeValueAsString(value))


def scala_list(spark: SparkSession, items: list) -> Any:
    """A Scala Seq holding these items (Python values or JVM objects)."""
    converters = java_class(spark, "scala.jdk.javaapi.CollectionConverters")
    return converters.asScala(java_class(spark, "java.util.ArrayList")(items)).toSeq()


def java_exception(error: BaseException) -> Any:
    """The Java exception behind a py4j or PySpark error, or None."""
    return getattr(error, "java_exception", None) or getattr(error, "_origin", None)


def java_messages(error: BaseException) -> list[str]:
    """`toString()` of the Java exception behind `error` and of each of its causes, outermost first."""
    lines = []
    cause = java_exception(error)
    while cause is not None and len(lines) < 20:
        lines.append(str(cause.toString()))
        cause = cause.getCause()
    return lines


def java_classes(error: BaseException) -> list[str]:
    """Class names of the Java exception behind `error` and of each of its causes, outermost first."""
    names = []
    cause = java_exception(error)
    while cause is not None and len(names) < 20:
        names.append(str(cause.getClass().getName()))
        cause = cause.getCause()
    return names


def is_java_error(error: BaseException, class_name: str) -> bool:
    """True when `error` wraps a Java exception of this simple class name, or has one among its causes (a Hadoop
    `RemoteException(org.apache...FileAlreadyExistsException): ...` counts as the class it carries)."""
    for line in java_messages(error):
        head = line.split(":", 1)[0]
        if class_name in {name.rsplit(".", 1)[-1] for name in re.findall(r"[\w.$]+", head)}:
            return True
    return False


def java_cause(error: BaseException) -> str:
    """The most telling message of a Spark/py4j error (Spark's `[ERROR_CLASS] ...` where there is one)."""
    messages = []
    java = java_exception(error)
    while java is not None and len(messages) < 20:
        message = java.getMessage()
        if message:
            messages.append(str(message))
        java = java.getCause()
    messages.append(str(error))
    best = next((m for m in messages if m.startswith("[")), messages[-1 if len(messages) == 1 else 0])
    return " ".join(best.split())[:600]


@contextmanager
def session_conf(spark: SparkSession, settings: dict[str, str]):
    """Set Spark SQL settings for the duration of one operation, then put the session's own values back."""
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@contextmanager
def job_description(spark: SparkSession, description: str):
    """Label the Spark jobs this thread starts meanwhile (shown in the Spark UI and its status store)."""
    context = spark.sparkContext
    previous = context.getLocalProperty(JOB_DESCRIPTION)
    context.setJobDescription(description)
    try:
        yield
    finally:
        context.setLocalProperty(JOB_DESCRIPTION, previous)  # None clears it


def isolated_session(spark: SparkSession, settings: dict[str, str]) -> SparkSession:
    """A clone of `spark` (same SparkContext and catalog, a copy of its SQL settings) with `settings` on top: SQL
    settings for one operation that neither change the caller's session nor the jobs of its other threads."""
    from pyspark.sql import SparkSession

    clone = SparkSession(spark.sparkContext, spark._jsparkSession.cloneSession())
    for key, value in settings.items():
        clone.conf.set(key, value)
    return clone
