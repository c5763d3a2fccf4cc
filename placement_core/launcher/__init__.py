"""Start a plan's processes as Ray actors on the nodes and GPUs the plan names, each with its planned environment.

    from placement_core.launcher import launch, read_plan
    plan = read_plan()                              # the plan the operator mounted in the Ray pods
    actors = launch(plan, "actor", ActorWorker)     # one actor per process of the component
    actors.run("train_step")                        # results in rank order

Ray cannot be asked for specific GPU ids, and mixing `num_gpus>0` actors with self-managed visibility
double-books GPUs. So every actor asks for `num_gpus=0` and for the custom resources of `placement_core.contract`
that the operator makes each Ray node declare: one per node rank and one per GPU. Modules: `plan` (the plan and
GPU sharing counts), `resources` (demand against what Ray has, as messages), `groups` (the launch, worker groups
and their calls), `actors` (the actor Ray runs for a worker, and how one process is started where the plan
says), `replacing` (starting a lost replica again while the others go on: `LaunchOptions.replace_lost`; and
the ranks a resize in place adds: `WorkerGroup.resize`),
`membership` (which ranks of a replaceable group are live), `simulated` (a multi-node Ray cluster in one process
tree), `checkpoint` (a driver's step and state saved atomically, resumed on a new attempt), `synthetic` (a
synthetic workload whose step times follow declared laws; docs/driver.md), `demo` (the reference driver: its
command line and one-shot exercise), `demo_worker` (its worker, the parts its components play and its process
table) and `steps` (its `--steps` mode). How each process is checked against its plan entry, and how step times
are reported, is `placement_core.observe` (whoever launched the processes). Ray is imported only when a cluster
is used.
"""

from placement_core.errors import LaunchError, WorkerDiedError
from placement_core.launcher.actors import PLACEMENT_OPTIONS
from placement_core.launcher.groups import (
    GroupCall,
    LaunchOptions,
    WorkerGroup,
    binding_report,
    connect,
    launch,
    launch_all,
    ray_node_addresses,
    resize_groups,
)
from placement_core.launcher.membership import Membership
from placement_core.launcher.plan import RESOURCE_STEP, LaunchPlan, MountedPlan, load_plan, read_plan
from placement_core.launcher.resources import check_resources
from placement_core.launcher.simulated import simulated_cluster
from placement_core.observe.verify import BindingError, BindingReport, ProcessCheck

__all__ = [
    "PLACEMENT_OPTIONS",
    "RESOURCE_STEP",
    "BindingError",
    "BindingReport",
    "GroupCall",
    "LaunchError",
    "LaunchOptions",
    "LaunchPlan",
    "Membership",
    "MountedPlan",
    "ProcessCheck",
    "WorkerDiedError",
    "WorkerGroup",
    "binding_report",
    "check_resources",
    "connect",
    "launch",
    "launch_all",
    "load_plan",
    "ray_node_addresses",
    "read_plan",
    "resize_groups",
    "simulated_cluster",
]
