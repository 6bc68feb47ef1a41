"""The directory the ``python`` image puts first on ``PYTHONPATH``: its ``sitecustomize`` runs at the start
of every Python program in such a pod (see :mod:`vplane.runtime.podbind`)."""
