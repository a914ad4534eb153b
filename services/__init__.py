"""The three thin processes. Each imports the shared core in `lakewarden`."""
