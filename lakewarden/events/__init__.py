"""Timeline events: how lakewarden learns of every commit.

Three roads lead to one idempotent ingest (`ingest.py`): a NOTIFY trigger on the
JDBC catalog's table list (installed by `lakewarden.db.trigger`, heard by `listener.py`),
engines pushing to the API (`POST /api/v1/events`), and a poller that catches anything
missed (`poller.py`).
"""
