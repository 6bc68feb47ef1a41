"""Pure Kubernetes data: object meta, selectors, patch engines, Status errors, codecs.

Nothing here does I/O or imports another vplane package, so every piece is testable with plain values.
"""
