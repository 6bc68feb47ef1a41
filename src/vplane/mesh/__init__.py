"""The mesh layer (see docs/architecture.md)."""
