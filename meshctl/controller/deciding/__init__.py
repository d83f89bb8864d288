"""The controller's deciding half, pure: the world as observed and stored in (``world``), one
step out (``step``): the jobs' states reconciled with what Ray says (``states``), the nodes
and their health (``nodes``), jobs leaving their nodes (``leaving``), the scheduling cycle
through the lifecycle (``scheduling``, ``services``), dispatches (``dispatch``) and idle
cloud instances (``idle``), composed in ``decide``. No Ray, clouds, processes, network,
files or clock (an import contract holds it); the loop (``controller/loop.py``) does the I/O
around it."""
