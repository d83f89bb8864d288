"""The API server's routes, one module per resource: ``jobs``, ``pools``, ``nodes``, ``mesh``
(status, policies, up and down, the audit log). Each route checks the caller's role
(``common.allowed``) and calls the application layer (``meshctl.app``) or the server's own
verbs on jobs (``meshctl.server.jobs``)."""
