"""observe -> decide -> provision -> apply: one level-triggered reconcile of an RLJob (docs/architecture.md)."""
