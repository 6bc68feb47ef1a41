"""The controllers layer (see docs/architecture.md)."""
