"""This machine, as meshctl uses it: where its state lives when no ``--home`` is given
(``home``), ports for the servers it starts (``ports``), and processes as ``/proc`` shows them
(``procs``). The standard library only: the entry point reads the home before anything heavy is
imported."""
