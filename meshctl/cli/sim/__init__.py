"""``meshctl sim``: the simulator's commands (``commands``), sweeps of seeds and settings
(``sweep``), and what they print (``view``); the simulator itself is ``meshctl.sim``."""
