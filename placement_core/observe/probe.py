"""The in-process probe for framework jobs: what each process of an RL framework sees, printed on one line.

A framework job (RLJob spec.framework other than rlplace) runs the framework's own launcher, unchanged, in the
user's image, which need not have rlplace. So this file is self-contained (standard library only; NVML when the
image has pynvml): the operator ships it in the job's ConfigMap, mounts it in every Ray pod and puts its
directory on PYTHONPATH under the module name `rlplace_probe` (placement_core.contract.PROBE_MODULE).

- RLinf imports the module named by RLINF_EXT_MODULE in every Worker, after Ray applied the worker's
  runtime_env and before the Worker's __init__, and calls `register()`: the environment RLinf computed for the
  process (RANK, CUDA_VISIBLE_DEVICES, ...) is final then.
- Ray calls `runtime_env_hook` (RAY_RUNTIME_ENV_HOOK, set on the head) in the framework's driver when it calls
  ray.init. It starts a thread in the driver that reads Ray's State API (every named actor, its Ray node's
  rlplace node-rank label, its pid and the CUDA_VISIBLE_DEVICES of its runtime_env) and prints it as
  `rlplace-actors: {json}` whenever it changed: the outside view of the binding. For RLinf it passes the step
  times RLinf logs (MetricLogger.log, its `time/*` keys) to the operator's progress endpoint, raw: the operator
  maps them (placement_core.observe.adapters).
- For a framework that leaves GPU ids to Ray (veRL: RLPLACE_FRAMEWORK=verl on the head), the same hook adds
  `worker_setup` as the job's `worker_process_setup_hook`, which Ray runs in every worker process of the job.
  Ray assigns an actor's GPUs (CUDA_VISIBLE_DEVICES) only after the hook, when the actor's creation task runs,
  so `worker_setup` starts a thread that waits for that and then prints the record, with the actor's name and
  the GPU ids Ray gave it. The thread also passes on the step times veRL's `file` logger writes (JSONL at
  $VERL_FILE_LOGGER_PATH, which the operator sets in the pods): one process per pod tails the file.

`register()` prints one line, `rlplace-probe: {json}`, to the process's stdout. Ray forwards worker output to
the driver (the head pod sets RAY_DEDUP_LOGS=0 so that no line is folded into another), and the operator reads
the lines from the driver's log and checks them against the plan (operator: framework.py). The record holds the
process's group and rank, the variables a placement sets, the pod's node rank and Kubernetes node, and the
device UUIDs NVML shows when the node has GPUs.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

#: The line prefixes; the operator's parser uses the same texts (placement_core.contract: PROBE_PREFIX,
#: ACTORS_PREFIX; tests/placement_core/test_framework_binding.py holds them equal).
PREFIX = "rlplace-probe: "
ACTORS_PREFIX = "rlplace-actors: "
#: The Ray node label with the node's rank in the plan (placement_core.contract.NODE_LABEL).
NODE_LABEL = "rlplace.io/node-rank"
#: How often the driver-side thread reads the State API, and for how long it keeps reading after the set of
#: actors last changed (a training loop does not start new workers; the thread then stops costing anything).
WATCH_INTERVAL_S = 2.0
WATCH_QUIET_S = 120.0
#: The most entries Ray's State API returns by default (RAY_MAX_LIMIT_FROM_API_SERVER raises it).
STATE_API_LIMIT = 10_000
#: The variable with the names of the variables the record carries, where set (comma-separated): the plan's, the
#: framework's names for the process, and what the operator set in the pod. The operator sets it in every pod of
#: a framework job from placement_core.contract.PROBE_VARIABLES, the one list of them.
VARIABLES_ENV = "RLPLACE_PROBE_VARIABLES"
#: The head's variable naming the framework (placement_core.contract.FRAMEWORK_ENV).
FRAMEWORK_ENV = "RLPLACE_FRAMEWORK"
#: Where veRL's `file` logger writes each step's metrics, one JSON object per line (`{"step", "data"}`).
VERL_METRICS_ENV = "VERL_FILE_LOGGER_PATH"
#: How long a worker process waits for Ray to make it an actor, and then for its GPU ids (an actor without
#: GPUs never gets any: its record then says so).
ACTOR_WAIT_S = 600.0
GPU_WAIT_S = 5.0


def device_uuids(visible: str | None) -> list[str] | None:
    """The UUIDs of the GPUs the process sees through NVML, in CUDA order; None without pynvml or a driver.

    NVML ignores CUDA_VISIBLE_DEVICES, so the visible subset is taken here by index (a UUID entry is kept as is).
    """
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        count = pynvml.nvmlDeviceGetCount()
        uuids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        uuids = [u.decode() if isinstance(u, bytes) else str(u) for u in uuids]
    finally:
        pynvml.nvmlShutdown()
    if visible is None:
        return uuids
    chosen = []
    for entry in (e.strip() for e in visible.split(",") if e.strip()):
        if entry.isdigit():
            chosen.append(uuids[int(entry)] if int(entry) < len(uuids) else f"<no device {entry}>")
        else:
            chosen.append(entry)
    return chosen


def recorded_variables(environ: Mapping[str, str]) -> list[str]:
    """The names of the variables a record carries (VARIABLES_ENV, as the operator set it in the pod)."""
    return [name for name in environ.get(VARIABLES_ENV, "").split(",") if name]


def record(**extra: object) -> dict[str, object]:
    """What this process sees now (and `extra`: what Ray told it)."""
    environ = os.environ
    return {
        "pid": os.getpid(),
        "env": {key: environ[key] for key in recorded_variables(environ) if key in environ},
        "uuids": device_uuids(environ.get("CUDA_VISIBLE_DEVICES")),
        **extra,
    }


def register(**extra: object) -> None:
    """RLinf's extension hook (RLINF_EXT_MODULE): print this process's record. Never raises: a probe that
    failed shows as a process without a record, which the operator's check names."""
    try:
        line = PREFIX + json.dumps(record(**extra), separators=(",", ":"), sort_keys=True)
    except Exception as err:  # the framework's process must start whatever the probe hits
        line = PREFIX + json.dumps({"pid": os.getpid(), "error": f"{type(err).__name__}: {err}"})
    print(line, file=sys.stdout, flush=True)


# -- in every worker process of a framework that leaves GPU ids to Ray (worker_process_setup_hook) -------------


def worker_setup() -> None:
    """Ray's worker_process_setup_hook: report this process once Ray has made it an actor and given it its
    GPUs, and (once per pod) pass veRL's logged step times on. Returns at once: Ray runs the hook before the
    actor's creation task."""
    threading.Thread(target=_report_when_assigned, name="rlplace-probe", daemon=True).start()
    if os.environ.get(VERL_METRICS_ENV):
        threading.Thread(target=_tail_metrics, args=(os.environ[VERL_METRICS_ENV],), daemon=True).start()


def _report_when_assigned() -> None:
    import ray

    context = ray.get_runtime_context()
    deadline = time.monotonic() + ACTOR_WAIT_S
    while context.get_actor_id() is None:  # a task worker never becomes an actor: it reports nothing
        if time.monotonic() > deadline:
            return
        time.sleep(0.1)
    # Ray sets the actor's CUDA_VISIBLE_DEVICES to its GPU ids just after it assigns them; until then the
    # variable is the pod's (which lists every GPU Ray was given on the node).
    gpus: list[str] = []
    deadline = time.monotonic() + GPU_WAIT_S
    while time.monotonic() < deadline:
        gpus = [str(g) for g in context.get_accelerator_ids().get("GPU", [])]
        if gpus and os.environ.get("CUDA_VISIBLE_DEVICES") == ",".join(gpus):
            break
        time.sleep(0.1)
    register(actor=context.get_actor_name(), gpu_ids=gpus)


def _tail_metrics(path: str) -> None:
    """Post each line veRL's file logger appends to `path`, from one process of the pod: the one that holds
    the lock beside the file (another takes over when it exits). The offset reached is kept beside the file
    too, so a takeover does not post a step twice."""
    import fcntl

    lock_path, offset_path = f"{path}.rlplace-lock", f"{path}.rlplace-offset"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(lock_path, "a") as lock:
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    time.sleep(WATCH_INTERVAL_S)
            offset = _read_offset(offset_path)
            while True:
                posted = _post_new_lines(path, offset)
                if posted != offset:
                    with open(offset_path, "w") as handle:
                        handle.write(str(posted))
                    offset = posted
                time.sleep(WATCH_INTERVAL_S)
    except Exception:  # progress is best effort: training never waits on it
        return


def _read_offset(path: str) -> int:
    try:
        with open(path) as handle:
            return int(handle.read() or 0)
    except (OSError, ValueError):
        return 0


def _post_new_lines(path: str, offset: int) -> int:
    """Post the whole lines of `path` after `offset`; the offset after them."""
    if not os.path.exists(path):
        return offset
    if os.path.getsize(path) < offset:
        offset = 0  # the driver ran again in the same pods: its logger started the file over
    with open(path, "rb") as handle:
        handle.seek(offset)
        for raw in iter(handle.readline, b""):
            if not raw.endswith(b"\n"):
                break  # a line being written: read it whole next time
            offset += len(raw)
            _post_logged(raw)
    return offset


def _post_logged(raw: bytes) -> None:
    try:
        entry = json.loads(raw)
        send_metrics("verl", dict(entry["data"]), int(entry["step"]))
    except (ValueError, KeyError, TypeError):
        return


# -- in the framework's driver (RAY_RUNTIME_ENV_HOOK) ----------------------------------------------------------

_started = threading.Event()


def runtime_env_hook(runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    """Ray's driver hook: (once per process) the watcher thread started, and the runtime_env unchanged, or
    for veRL with `worker_setup` as its worker_process_setup_hook. A setup hook of the program's own is kept
    (Ray runs one): its processes then print no record, which the check names."""
    if not _started.is_set():
        _started.set()
        threading.Thread(target=_watch_actors, name="rlplace-probe", daemon=True).start()
        _observe_metrics()
    env = dict(runtime_env or {})
    if os.environ.get(FRAMEWORK_ENV) == "verl":
        env.setdefault("worker_process_setup_hook", f"{__name__}.worker_setup")
    return env


def actors_now() -> list[dict[str, object]]:
    """Every live named actor of the Ray cluster: name, Ray namespace, node rank (the rlplace label of its
    Ray node, None without one), pid and the CUDA_VISIBLE_DEVICES its runtime_env sets (None: not set)."""
    import ray
    from ray.util.state import list_actors, list_nodes

    # This driver's own cluster, by address (another Ray instance on the machine must not make it ambiguous).
    address = ray.get_runtime_context().gcs_address
    ranks = {}
    for node in list_nodes(address=address, detail=True, limit=STATE_API_LIMIT):
        label = (getattr(node, "labels", None) or {}).get(NODE_LABEL)
        ranks[node.node_id] = int(label) if label is not None and label.isdigit() else None
    seen = []
    for actor in list_actors(address=address, filters=[("state", "=", "ALIVE")], detail=True, limit=STATE_API_LIMIT):
        if not actor.name:
            continue
        env = _runtime_env_vars(getattr(actor, "serialized_runtime_env", None))
        seen.append(
            {
                "name": actor.name,
                "namespace": actor.ray_namespace,
                "node_rank": ranks.get(actor.node_id),
                "pid": actor.pid,
                "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
            }
        )
    return sorted(seen, key=lambda a: (str(a["namespace"]), str(a["name"])))


def _runtime_env_vars(serialized: object) -> dict[str, str]:
    try:
        raw = json.loads(serialized) if isinstance(serialized, str) else (serialized or {})
        env = raw.get("env_vars") or {}
        return {str(k): str(v) for k, v in env.items()}
    except (ValueError, AttributeError):
        return {}


def _watch_actors() -> None:
    import ray

    while not ray.is_initialized():
        time.sleep(0.2)
    last: list[dict[str, object]] | None = None
    changed = time.monotonic()
    while time.monotonic() - changed < WATCH_QUIET_S:
        time.sleep(WATCH_INTERVAL_S)
        try:
            now = actors_now()
        except Exception:  # the State API can be briefly unavailable; the next look tells
            continue
        if now != last:
            print(ACTORS_PREFIX + json.dumps(now, separators=(",", ":")), flush=True)
            last, changed = now, time.monotonic()


def _observe_metrics() -> None:
    """Pass each metrics dict RLinf's MetricLogger logs on to the operator too (its own call is unchanged)."""
    try:
        from rlinf.utils.metric_logger import MetricLogger  # type: ignore[import-not-found]
    except Exception:  # not an RLinf driver, or RLinf fails to import: nothing to observe
        return
    logged: Callable[..., Any] = MetricLogger.log

    def log(self: object, data: dict[str, Any], step: int, *args: Any, **kwargs: Any) -> Any:
        result = logged(self, data, step, *args, **kwargs)
        send_metrics("rlinf", data, step)
        return result

    MetricLogger.log = log


def send_metrics(framework: str, metrics: dict[str, Any], step: int) -> None:
    """POST one step's metrics to the operator's progress endpoint ($RLPLACE_PROGRESS_URL, with the token
    in $RLPLACE_PROGRESS_TOKEN_FILE) in the background; nothing without the endpoint."""
    url = os.environ.get("RLPLACE_PROGRESS_URL")
    numbers = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    if not url or not numbers:
        return
    body = json.dumps({"framework": framework, "iteration": int(step), "metrics": numbers}).encode()

    def post() -> None:
        headers = {"Content-Type": "application/json"}
        token_file = os.environ.get("RLPLACE_PROGRESS_TOKEN_FILE")
        try:
            if token_file:
                with open(token_file) as handle:
                    headers["Authorization"] = f"Bearer {handle.read().strip()}"
            request = urllib.request.Request(url, data=body, headers=headers, method="POST")
            urllib.request.urlopen(request, timeout=10).close()  # the operator's URL, set by it
        except Exception:  # progress is best effort: training never waits on it
            return

    threading.Thread(target=post, name="rlplace-progress", daemon=True).start()
