"""Named causes from what the Kubernetes API shows: why a job's pods cannot start (`starting`), which of its
processes died (`losses`), and the `Cause` both name (`causes`)."""
