"""What the operator serves beside kopf: the progress endpoint jobs report their step times to, and /metrics."""
