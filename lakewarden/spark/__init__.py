"""Spark: where jars come from, the warm session, and the job entrypoints."""
