"""How a cloud instance joins its pool by itself: the startup script meshctl renders for it
(``script``), and what that script runs on the instance (``join``, ``metadata``)."""
