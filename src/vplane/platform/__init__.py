"""The platform: projects, tenant clusters (VirtualClusterInstances), connected clusters, access keys and
identities, the mesh coordinator and relay, all served as ``management.loft.sh/v1`` on a vplane API server."""
