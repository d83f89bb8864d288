"""Data next to the GPUs: each node's cache of datasets, kept by its agent.

- ``sources``: a dataset's location read through pyarrow's filesystems (a local or shared
  folder, S3 with an endpoint override, GCS): its files, their sizes, and its version;
- ``cache``: the node's cache folder: entries keyed by location and version, fetched whole from
  a peer that holds them or from the source, checked by size and SHA-256, evicted least
  recently used first unless a job needs them (``meshctl.lifecycle.datacache``'s rule);
- ``peers``: another node's agent as a source (its manifest and files over HTTP, token
  required);
- ``check``: a job's datasets checked at submit (listed at their sources, within a deadline;
  no larger than the mesh's largest node cache).

The node agent serves the cache (``meshctl.agent.server``); a job finds its data through
``meshctl.workload.dataset``.
"""

from __future__ import annotations
