"""Pure builders: (job, plan) -> Kubernetes object dicts. No client calls, no kopf."""
