"""The tenant layer (see docs/architecture.md)."""
