"""Worker: claims pending tasks, reads the table with pyiceberg, writes a plan (no JVM)."""
