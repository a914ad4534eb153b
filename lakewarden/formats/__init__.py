"""Table formats behind one seam (`base`): what the control plane asks of a table format.

Iceberg (`formats.iceberg`) is the first implementation; Hudi and Delta Lake slot in
beside it (research: issue 24 §1, issues 28 and 29).
"""
