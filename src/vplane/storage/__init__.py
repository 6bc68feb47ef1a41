"""Storage: the :class:`~vplane.storage.interface.Store` interface and its backends.

A store knows keys, opaque values and revisions, nothing about Kubernetes: the API layer decides what
goes in the bytes. SQLite is the embedded default; etcd fits the same interface for HA.
"""
