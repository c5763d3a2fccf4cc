"""The one place for the names, labels and keys of the objects the operator reads and creates (KubeRay's
`common/association.go` is the model): its own, and the API groups, kinds and labels of KubeRay, Kueue and
Dynamic Resource Allocation as rlplace reads and writes them."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from rlplace_operator.api.base import GROUP, VERSION

#: (namespace, name) of an RLJob.
JobKey = tuple[str, str]

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "rlplace"
JOB_LABEL = "rlplace.io/job"
#: The node label with the node's host name: the worker pods' node affinity, and one worker pod per host.
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The node labels of network topology, widest first (Kueue's and the Kubernetes community's convention): nodes
#: labelled with them need no declaration; the hostname level below them is the node itself (docs/admission.md).
TOPOLOGY_LEVELS = ("network.topology.kubernetes.io/block", "network.topology.kubernetes.io/rack")
#: NVIDIA's GPU feature discovery label on nodes of one multi-node NVLink domain (GB200 NVL72: `<cluster>.<clique>`);
#: a NodeGroup lists it as a level like any other (docs/admission.md, "Racks and blocks").
NVLINK_CLIQUE_LABEL = "nvidia.com/gpu.clique"
#: KubeRay's pod label with the Ray node type (head, worker).
KUBERAY_NODE_TYPE_LABEL = "ray.io/node-type"
#: KubeRay's pod label with the worker group a worker pod belongs to.
KUBERAY_GROUP_LABEL = "ray.io/group"
#: KubeRay runs a pod template's own container command (its `ray start` in $KUBERAY_GEN_RAY_START_CMD).
KUBERAY_OVERWRITE_COMMAND = "ray.io/overwrite-container-cmd"
#: Node label that orders nodes inside a NodeGroup (an integer; nodes without it come last, then by name).
NODE_RANK_LABEL = "rlplace.io/node-rank"
#: Annotation with profiled costs (JSON: actor_cost, inference_cost, rollout_cost) that turns on auto placement.
PROFILE_ANNOTATION = "rlplace.io/profile"

#: RayCluster annotation: the nodes its worker pods are pinned to, comma-separated. The operator rebuilds which
#: nodes admitted jobs hold from it after a restart (see docs/admission.md).
NODES_ANNOTATION = "rlplace.io/nodes"
#: The RayCluster annotation with the GPUs its worker pods claim on DRA nodes (`node=0,1,2,3 ...`), so a restarted
#: operator knows them before the claims are allocated.
GPUS_ANNOTATION = "rlplace.io/gpus"
#: On a RayJob: the job's attempt it runs (status.attempts when it was made); an older one is a stopped attempt's.
ATTEMPT_ANNOTATION = "rlplace.io/attempt"
#: On a RayJob: RLJobSpec.restart_digest of the spec it was made for. A running job's new spec that changes more
#: than replicas (another digest) restarts it on the new plan; one that changes only replicas resizes it in place.
SPEC_DIGEST_ANNOTATION = "rlplace.io/spec-digest"
#: On a running job's head pod: the digest of the plan it should see (a resize in place changed the plan; a pod
#: changed is a pod the kubelet syncs, which refreshes its ConfigMap volume).
PLAN_DIGEST_ANNOTATION = "rlplace.io/plan-digest"

#: Audience of the projected ServiceAccount token a job's head pod sends with its progress reports: a token
#: for this audience is good for nothing else (not the API server, whose audience differs).
PROGRESS_AUDIENCE = "rlplace.io/progress"

RLJOB_PLURAL = "rljobs"
NODEGROUP_PLURAL = "nodegroups"
API_VERSION = f"{GROUP}/{VERSION}"
RAY_GROUP = "ray.io"
RAY_VERSION = "v1"
RAYCLUSTER_PLURAL = "rayclusters"
RAYJOB_PLURAL = "rayjobs"
#: KubeRay's pod label with the RayCluster's name. The operator's own Ray pods also carry the job label, which names
#: the job when the cluster belongs to its RayJob.
RAY_CLUSTER_POD_LABEL = "ray.io/cluster"
#: KubeRay's name for the container that runs `ray job submit` (the submitter Job's pod, or the head's sidecar).
SUBMITTER_CONTAINER = "ray-job-submitter"
#: The container of a Ray worker pod (builders/raycluster.py), where the job's processes run.
WORKER_CONTAINER = "ray-worker"


def placement_configmap_name(job: str) -> str:
    return f"{job}-placement"


def raycluster_name(job: str) -> str:
    return job


def rayjob_name(job: str) -> str:
    """The RayJob of a job with an entrypoint; KubeRay names its submitter Job the same."""
    return job


def worker_pods_selector(job: str) -> str:
    """Label selector of a job's Ray worker pods, whether its RayCluster is its own or its RayJob's (KubeRay
    names that one after the RayJob with a random suffix)."""
    return f"{JOB_LABEL}={job},ray.io/node-type=worker"


#: KubeRay puts a group's name in its pods' names and a label value: kept well under 63 characters.
MAX_WORKER_GROUP_NAME = 40


def worker_group_name(node_groups: Sequence[str], taken: Collection[str]) -> str:
    """A worker group's name: its NodeGroups' names (`nodes` for none), made unique among `taken` with a
    `-<n>` suffix (one NodeGroup whose nodes differ in shape gives several groups)."""
    base = ("-".join(node_groups) or "nodes")[:MAX_WORKER_GROUP_NAME].strip("-.") or "nodes"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


def child_labels(job: str) -> dict[str, str]:
    """Labels every child of a job carries."""
    return {MANAGED_BY_LABEL: MANAGED_BY, JOB_LABEL: job}


def progress_path(namespace: str, job: str) -> str:
    """Path of a job's progress endpoint on the operator (the URL in its head pod adds the operator's address)."""
    return f"/v1/namespaces/{namespace}/rljobs/{job}/progress"


# -- Dynamic Resource Allocation (resource.k8s.io/v1) ------------------------------------------------------------
DRA_GROUP = "resource.k8s.io"
DRA_VERSION = "v1"
CLAIM_TEMPLATE_PLURAL = "resourceclaimtemplates"
RESOURCE_CLAIM_PLURAL = "resourceclaims"
RESOURCE_SLICE_PLURAL = "resourceslices"
DEVICE_CLASS_PLURAL = "deviceclasses"

# -- Kueue (kueue.x-k8s.io/v1beta2): the Workload rlplace makes for a job, and the objects it reads ---------------
WORKLOAD_GROUP = "kueue.x-k8s.io"
WORKLOAD_VERSION = "v1beta2"
WORKLOAD_PLURAL = "workloads"
LOCALQUEUE_PLURAL = "localqueues"
CLUSTERQUEUE_PLURAL = "clusterqueues"
PRIORITY_CLASS_PLURAL = "workloadpriorityclasses"
#: Kueue's Topology: the node label of each network level, widest first (a NodeGroup may name one).
TOPOLOGY_PLURAL = "topologies"
#: Kueue's ResourceFlavor: its nodeLabels and topologyName say which Topology a NodeGroup's nodes are in.
RESOURCE_FLAVOR_PLURAL = "resourceflavors"
#: The RLJob label that sends it through Kueue (the LocalQueue in the job's namespace), as on any Kueue job.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: The RLJob label naming its WorkloadPriorityClass.
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
#: On rlplace's Ray pods of a Kueue job: Topology-Aware Scheduling counts them inside their Workload, not again as
#: pods outside it.
UNCONSTRAINED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"
#: On the Workload of a job with resizable components: Kueue admits its growth as a new Workload slice and takes a
#: lower PodSet count of the admitted one (its ElasticJobsViaWorkloadSlices feature).
ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"
#: On a Workload slice: the namespace/name of the admitted slice it replaces once Kueue admits it.
SLICE_REPLACEMENT_ANNOTATION = "kueue.x-k8s.io/workload-slice-replacement-for"
#: On rlplace's Workloads: the digest of the PodSets they ask for (a shrink lowers the counts of the admitted one in
#: place, so its name no longer says it).
POD_SETS_ANNOTATION = "rlplace.io/pod-sets"
