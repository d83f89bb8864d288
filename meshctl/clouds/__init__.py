"""Cloud providers behind one small interface (``base.Cloud``): ``aws`` (boto3), ``gcp``
(google-cloud-compute) and ``fake`` (in memory, for tests and the simulator). The SDKs are
imported when a provider is built, never when meshctl starts."""
