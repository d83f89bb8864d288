"""The command line: one module per command group; render.py is the only one that prints."""
