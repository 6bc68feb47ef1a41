"""A Kubernetes-compatible API server: routing, the registry of kinds, discovery, OpenAPI, watch,
authentication, authorization, admission and aggregation, over the storage layer's cache."""
