"""The API server's package: what it serves over HTTP (Prometheus metrics so far)."""
