{{/* The release's full name: the release name, or "<release>-rlplace" when it does not contain "rlplace". */}}
{{- define "rlplace.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "rlplace.serviceAccountName" -}}
{{- default (printf "%s-operator" (include "rlplace.fullname" .)) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "rlplace.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "rlplace.labels" -}}
{{ include "rlplace.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: rlplace
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Rules for the namespaced resources the operator handles (granted cluster-wide, or per watched namespace). */}}
{{- define "rlplace.namespacedRules" -}}
- apiGroups: [rlplace.io]
  resources: [rljobs]
  verbs: [get, list, watch, patch]
- apiGroups: [rlplace.io]
  resources: [rljobs/status]
  verbs: [get, patch]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, create, patch]
- apiGroups: [ray.io]
  resources: [rayclusters]
  verbs: [get, list, watch, create, patch, delete]
# Jobs with an entrypoint run as RayJobs (suspend is a patch). A job whose pods cannot start, or that gives
# its nodes back to the queue, has its RayJob deleted (its RayCluster and submitter go with it).
- apiGroups: [ray.io]
  resources: [rayjobs]
  verbs: [get, list, watch, create, patch, delete]
# A job labelled kueue.x-k8s.io/queue-name is admitted by Kueue through a Workload rlplace makes for it; rlplace
# writes its PodsReady and Finished conditions and, after an eviction, releases its quota (docs/kueue.md). A
# running job that shrinks in place lowers its elastic Workload's counts (patch; docs/elastic.md).
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [get, list, watch, create, delete, patch]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/status]
  verbs: [get, update, patch]
# Why a job waits: its LocalQueue (and whether it exists); watched, so that an admitted job says when its
# LocalQueue is deleted under it.
- apiGroups: [kueue.x-k8s.io]
  resources: [localqueues]
  verbs: [get, list, watch]
# A worker pod on a DRA NodeGroup claims exactly its GPUs through a ResourceClaimTemplate the job owns; a new pin
# (restart, re-placement) makes a new one and the old ones are deleted.
- apiGroups: [resource.k8s.io]
  resources: [resourceclaimtemplates]
  verbs: [get, list, create, delete]
# The driver's binding report is read from its log (the RayJob submitter's pod); the Ray pods get no rights.
- apiGroups: [""]
  resources: [pods]
  verbs: [list]
# The worker pod of a lost node whose ranks are all Replace ranks is deleted (at once when the node is gone) so
# that KubeRay makes it on the node they move to (docs/replace.md). The head pod of a job resized in place is
# annotated with the plan's digest, so that its kubelet refreshes the plan it mounts at once (docs/elastic.md).
- apiGroups: [""]
  resources: [pods]
  verbs: [delete, patch]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
# Events: the operator posts its own on RLJobs, and reads the Warning ones about a job's RayCluster, RayJob,
# submitter and pods (KubeRay's FailedToCreateWorkerPod, the kubelet's image pull errors) to name a failure.
- apiGroups: [""]
  resources: [events]
  verbs: [create, list]
{{- end -}}
