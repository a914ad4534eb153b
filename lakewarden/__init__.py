"""lakewarden: a table-management control plane for Apache Iceberg tables.

The core package holds everything the three services share; `services/` holds
the thin processes (api, worker, scheduler) that run it. Imports point down the layers
only: LAYERS.md lists them, bottom to top, and tests/unit/test_layers.py checks it.
"""

__version__ = "0.1.0"
