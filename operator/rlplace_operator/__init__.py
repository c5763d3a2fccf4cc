"""rlplace's Kubernetes operator: NodeGroup and RLJob resources, placed by placement_core, run on KubeRay."""
