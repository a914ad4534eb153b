"""Scheduler: one leader (lease + epoch) dispatches planned tasks to Spark, tracks, retries."""
