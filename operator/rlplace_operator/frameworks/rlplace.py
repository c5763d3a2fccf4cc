"""A job whose entrypoint is a driver written against rlplace's launcher (placement_core.launcher.launch_all): the
launcher starts every process on its planned node and GPUs, each checks itself, and the driver prints the binding
report the operator reads. Everything is the protocol's default but Ray's flag below."""

from __future__ import annotations

from typing import ClassVar

from rlplace_operator.api.rljob import FrameworkName
from rlplace_operator.frameworks.base import Framework


class RlplaceDriver(Framework):
    name: ClassVar[FrameworkName] = FrameworkName.RLPLACE

    def worker_env(self, gpus: int, held: tuple[int, ...]) -> list[dict[str, str]]:
        # Ray must not overwrite the CUDA_VISIBLE_DEVICES rlplace's launcher sets for each process.
        return [{"name": "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", "value": "1"}]
