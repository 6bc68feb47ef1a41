"""Connected clusters on the platform: the Cluster reconcile loop, the platform's own mesh node, the
gateway through agent tunnels, the agent values endpoint, and the agent chart's installs with helm.

Modules: ``status`` (pure status decisions, the runbook's table), ``values`` (agent values, release
decisions, accepted kubeconfigs: pure), ``helm`` (the helm binary), ``localclient`` (the platform's mesh
node), ``gateway`` (HTTPS to a cluster's API through its agent), ``controller`` (the loop), ``release`` (its agent
release step: helm, stuck operations, where each release lives), ``upgrade`` (chart upgrades through the
temporary bridge), ``wiring``
(what the platform process mounts). See docs/connected-clusters.md.
"""
