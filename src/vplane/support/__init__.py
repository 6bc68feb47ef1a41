"""Process plumbing shared by every layer: logging, TLS material, task helpers, clocks."""
