"""A tenant control plane: an API server on a store shared by its replicas, a mesh node on the platform
network, leader election among replicas, and (when configured) the resource proxy."""
