"""What a run's error and a task's reason say about a failure: for an error from the JVM,
the Java exception (and its root cause), not py4j's "An error occurred while calling …"."""

from __future__ import annotations

from lakewarden.errors import headline
from lakewarden.isolation import error_line


class Py4JJavaError(Exception):
    """py4j's error as its message reads (the class is matched by name: no JVM here)."""


JAVA = (
    "An error occurred while calling o100.loadTable.\n"
    ": org.apache.iceberg.exceptions.RuntimeIOException: Failed to open input stream for "
    "file: hdfs://127.0.0.1:9000/wh/t/metadata/v3.metadata.json\n"
    "\tat org.apache.iceberg.hadoop.HadoopInputFile.newStream(HadoopInputFile.java:185)\n"
    "Caused by: java.io.IOException: Failed on local exception\n"
    "\tat org.apache.hadoop.ipc.Client.call(Client.java:1500)\n"
    "Caused by: java.net.ConnectException: Connection refused\n"
    "\t... 12 more"
)


def test_a_jvm_error_says_the_java_exception_and_its_root_cause() -> None:
    line = headline(Py4JJavaError(JAVA))
    assert line == (
        "Py4JJavaError: org.apache.iceberg.exceptions.RuntimeIOException: Failed to open input "
        "stream for file: hdfs://127.0.0.1:9000/wh/t/metadata/v3.metadata.json (caused by "
        "java.net.ConnectException: Connection refused)"
    )
    assert "o100" not in line


def test_a_jvm_error_without_a_cause_says_the_java_exception() -> None:
    text = "An error occurred while calling o7.sql.\n: java.lang.IllegalStateException: no\n"
    assert headline(Py4JJavaError(text)) == "Py4JJavaError: java.lang.IllegalStateException: no"


def test_a_jvm_error_with_no_java_text_keeps_its_first_line() -> None:
    assert headline(Py4JJavaError("An error occurred")) == "Py4JJavaError: An error occurred"


def test_other_errors_say_their_first_line() -> None:
    assert headline(ValueError("bad value\nmore")) == "ValueError: bad value"
    assert headline(RuntimeError()) == "RuntimeError"


def test_a_loop_failure_line_reads_the_same_way() -> None:
    assert error_line(Py4JJavaError(JAVA)).startswith(
        "Py4JJavaError: org.apache.iceberg.exceptions.RuntimeIOException"
    )
