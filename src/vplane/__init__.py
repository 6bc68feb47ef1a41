"""vplane: a multi-tenant Kubernetes platform's connectivity layer."""

__version__ = "0.1.0"
