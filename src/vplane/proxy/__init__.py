"""The proxy layer (see docs/architecture.md)."""
