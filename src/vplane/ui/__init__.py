"""The ui layer (see docs/architecture.md)."""
