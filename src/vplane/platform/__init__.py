"""The platform layer (see docs/architecture.md)."""
