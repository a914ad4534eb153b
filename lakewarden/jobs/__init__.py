"""Running one job: `execute` (the one way a job runs and records its outcome, in the
scheduler's warm Spark session or in its own application) and `application_entry`
(spark-submit's primary resource for a job that runs as its own Spark application)."""
