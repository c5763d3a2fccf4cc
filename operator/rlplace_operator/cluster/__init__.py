"""The cluster as the operator sees it: nodes and NodeGroups in rank order, taints, DRA devices and pins, and the
snapshot of what its watches hold."""
