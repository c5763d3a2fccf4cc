"""The RLJob and NodeGroup resources as pydantic models (the source of the CRDs and of the field reference), and every
name, label and API group the operator reads and writes."""
