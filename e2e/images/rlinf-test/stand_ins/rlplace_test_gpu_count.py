"""TEST-ONLY: the GPU count RLinf reads through NVML, on fake-GPU nodes that have no NVML.

RLinf counts a node's GPUs with Ray's NvidiaGPUAcceleratorManager.get_current_node_num_accelerators (an NVML
device count). The local cluster's GPUs are fake: Ray knows them from the pod's `--num-gpus`, NVML finds none.
This module, imported at every Python start by rlplace_test_gpu_count.pth (a .pth line: Debian's python
has a sitecustomize of its own), replaces that one function with the GPU count Ray declared
for the node the process runs on. Nothing of RLinf is changed. On a real GPU node the image is not used.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

_TARGET = "ray._private.accelerators.nvidia_gpu"


def _declared_gpus() -> int:
    import ray

    if not ray.is_initialized():
        return 0
    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            return int(node.get("Resources", {}).get("GPU", 0))
    return 0


def _patch(module: object) -> None:
    manager = module.NvidiaGPUAcceleratorManager  # type: ignore[attr-defined]
    manager.get_current_node_num_accelerators = staticmethod(_declared_gpus)


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object, target: object = None) -> object:
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: object) -> None:
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def install() -> None:
    if _TARGET in sys.modules:
        _patch(sys.modules[_TARGET])
    else:
        sys.meta_path.insert(0, _AfterImport())
