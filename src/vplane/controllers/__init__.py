"""The controllers layer: a reconcile runtime that reaches API servers only over HTTP.

- ``client``: the one transport seam (a typed facade over lightkube's ``AsyncClient``, plain dicts in
  and out), and the ``KubeAPI`` protocol that tests fake.
- ``leaderelection``: Lease-based leader election, pure decisions plus a thin loop.
- ``workqueue``: a de-duplicating work queue with per-key exponential back-off.
- ``informer``: a list-then-watch cache of one resource that resumes and relists on 410.
- ``reconciler``: informer → work queue → ``reconcile(key)`` workers.

Nothing here imports ``vplane.apiserver`` or ``vplane.storage`` (import-linter): the same code runs
against ``vplane apiserver`` and a real cluster.
"""
