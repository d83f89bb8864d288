"""The application layer: what a user can do with a mesh, written once, for the CLI and the API
server alike. Admit a job (``admission``), list, show and cancel jobs (``jobs``, ``jobdata``,
``training``), read their logs (``logs``), explain a decision (``explain``, ``decisions``), see
the pools (``pools``), the nodes (``nodes``) and the whole mesh (``status``), reload the
policies (``policies``); everything starts from an ``AppContext`` (``context``). The API
server's client (``remote``) speaks the same documents over HTTP.

It returns documents (the ``-o json`` shapes, ``meshctl.app.shapes``) and raises
``meshctl.errors``; it never prints: the CLI renders the documents, the API server answers
with them, so a command prints the same in local and server mode. It imports nothing from the
CLI or from the API server (import-linter holds it).
"""
