"""The simulator: the same lifecycle the controller decides with, run over a virtual clock on
real or synthetic traces at 10,000-GPU scale. ``core`` is the engine (pure: no I/O, no clock;
an import contract holds it); ``run`` is its shell: a mesh file, catalogs, policies and a
trace in (``run/traces.py`` reads the public traces), ``report.json``, charts and sweeps out.
The commands are ``meshctl/cli/sim/``."""
