"""TEST-ONLY stand-in for torch, in the e2e RLinf image only (never in rlplace's code path).

The fake-GPU nodes of the local cluster have no CUDA, and the PyPI torch is a 5.9 GB CUDA build. RLinf's
scheduler imports torch at module level (worker.py, collective/*, accelerator.py) but its placement, launch
and environment code does not compute with it. This package answers `import torch` and every `torch.*`
submodule with modules whose attributes are placeholders, which is enough for those imports and for type
annotations such as `torch.Tensor | None`. It is not a tensor library: a program that computes with tensors
needs the real torch.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+rlplace-test-stand-in"


class _Placeholder(type):
    """A class standing for any torch attribute: callable, subscriptable, usable in `X | None`."""

    def __getattr__(cls, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__name__}.{name}")

    def __getitem__(cls, item: object) -> type:
        return cls

    def __or__(cls, other: object) -> object:
        return cls  # `torch.Tensor | None` in an annotation: nothing computes with it

    __ror__ = __or__

    def __call__(cls, *args: object, **kwargs: object) -> object:
        return None


def _placeholder(name: str) -> type:
    return _Placeholder(name, (), {})


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "cuda_is_available":
            return lambda: False
        return _placeholder(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.startswith("torch."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


sys.meta_path.insert(0, _Finder())
sys.modules[__name__].__class__ = _StandInModule
__path__ = __path__  # a package: torch.* submodules are found by the finder above
