"""How a plan's processes are seen and checked, whoever launched them.

`verify`: each process checks from inside that its environment, node and GPUs are its plan entry's, and the
checks gather into a BindingReport. `probe`: the module the operator ships into a framework job's pods, whose
lines say what each process got. `processes` and `pools`: those lines read back into a BindingReport (exact
GPUs for RLinf; Ray's GPU ids per resource pool for veRL). `progress` and `adapters`: per-component step times,
from a timer or a framework's own metrics, reported to the operator. Ray is imported only inside the calls that
run in a Ray process.
"""
