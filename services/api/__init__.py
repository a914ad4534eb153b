"""API server: stateless; ingests commit events, evaluates policies, serves the REST API."""
