"""Planning: turn a task into a concrete job from the table's real file list (no JVM)."""
