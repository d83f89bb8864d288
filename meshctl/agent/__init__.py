"""The node agent: one per node, probing its GPUs, disks and NICs and serving a verdict.

- ``probe``: what a probe found (GPUs, XIDs, disks, NICs) and the verdict drawn from it
  (healthy, unknown, degraded, unhealthy), and the parsers of ``nvidia-smi``'s and the kernel
  log's text (pure);
- ``nvidia``: what NVIDIA's documentation says: each XID's severity, each GPU model's NVLink
  link count (pure data);
- ``xids``: which XIDs count: seen after the agent started or the operator's last clear,
  within a window (time as an argument);
- ``sources``: where the facts come from: NVML (nvidia-ml-py) where a driver is loaded, else
  ``nvidia-smi``; the kernel log (``dmesg``, or a file); ``statvfs``; ``/sys/class/net``;
- ``server``: the agent itself: probes every few seconds and answers ``GET /v1/probe`` over
  HTTP with the cluster's token required, and clears its XIDs on ``POST /v1/xids/clear``; it
  runs nothing it is sent;
- ``watch``: the controller's side: pulls every node's agent each cycle and says which nodes
  are unhealthy, suspect (their agent late) or dead (silent for longer).
"""

# What the controller's last cycle heard from every node's agent, in the state folder's run/
# (beside the controller's heartbeat; ``meshctl nodes list`` reads it).
AGENTS_FILE = "agents.json"
