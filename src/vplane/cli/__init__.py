"""The ``vplane`` command line."""
