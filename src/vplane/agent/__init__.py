"""The connected-cluster agent (``vplane agent``): what the agent chart runs in a connected cluster.

It dials out to the platform (probe ``/derp/probe``, then one mesh session registered with the cluster's
access key), serves the platform's relayed requests by forwarding them to its cluster's API server with
its own credentials (:mod:`vplane.agent.upstream`, the seam: in-cluster service account or a
kubeconfig), and runs a liveness loop. See docs/connected-clusters.md.
"""

from vplane.agent.agent import Agent, ConfigError
from vplane.agent.settings import AgentSettings

__all__ = ["Agent", "AgentSettings", "ConfigError"]
