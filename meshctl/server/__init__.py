"""The API server of a shared mesh: users and roles, the verbs of the CLI over HTTP, metrics."""
