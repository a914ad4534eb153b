"""Iceberg, the first table format behind the seam (`lakewarden.formats.base`).

`markers`: how a job's mark is spelled in a snapshot summary; `finder`: the one rule for
"this job's commits"; `history`: the one walker of a snapshot's ancestors (pyiceberg's
and Iceberg-Java's tables); `partitions`: decoding partition values and writing them as
SQL; `table`: the `TableFormat` the core calls.
"""
