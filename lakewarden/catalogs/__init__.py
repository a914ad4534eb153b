"""Which tables lakewarden watches: the Iceberg catalog (`catalog`), the catalogs a
deployment registers (`registry`), the management rules that adopt a catalog's tables
(`adoption`), and the detection of another optimizer that already maintains one
(`foreign`)."""
