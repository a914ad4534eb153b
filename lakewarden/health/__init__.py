"""A table's health: what is read of it (`measure`), the pure model and score (`model`),
the files-per-lookup metric of its layout (`files_per_lookup`), and `explain`, what would
run on it now and why."""
