{{/*
Names, labels and the image. Object names derive from the release's full name unless `names.*` overrides them
(the quickstart uses the overrides to keep the reference quickstart's object names).
*/}}

{{- define "pko.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name: the release name when it already contains the chart name, else "<release>-<chart>". */}}
{{- define "pko.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* objectName: (list $ "key" "default-suffix") → names.<key>, else "<fullname><suffix>". */}}
{{- define "pko.objectName" -}}
{{- $root := index . 0 }}
{{- $override := get ($root.Values.names | default dict) (index . 1) }}
{{- if $override }}
{{- $override | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s%s" (include "pko.fullname" $root) (index . 2) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "pko.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "pko.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pko.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* What the Deployment and the Service select: `selectorLabels` when set (the quickstart keeps the reference
quickstart's `control-plane: controller-manager`, a Deployment's selector being immutable), else the standard pair. */}}
{{- define "pko.podSelector" -}}
{{- if .Values.selectorLabels }}
{{- toYaml .Values.selectorLabels }}
{{- else }}
{{- include "pko.selectorLabels" . }}
{{- end }}
{{- end }}

{{/* What a Deployment and its Service select. The main operator's: pko.podSelector (unchanged, a Deployment's
selector being immutable). A shard's: its own instance label, so that neither selects the other's pods (the main
Service would otherwise send a shard's Program downloads to the main operator). */}}
{{- define "pko.shardSelector" -}}
{{- if .Shard }}
app.kubernetes.io/name: {{ include "pko.name" . }}
app.kubernetes.io/instance: {{ printf "%s-%s" .Release.Name .Shard | trunc 63 | trimSuffix "-" }}
pko.pulumi.com/shard: {{ .Shard }}
{{- else }}
{{- include "pko.podSelector" . }}
{{- end }}
{{- end }}

{{/* `sharding.shards` must be distinct names that can name a Lease, a Deployment and a Service. */}}
{{- define "pko.checkShards" -}}
{{- $seen := dict }}
{{- range .Values.sharding.shards }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" (toString .)) }}
{{- fail (printf "sharding.shards: %q is not a valid shard name (at most 63 lowercase letters, digits and '-', beginning and ending with a letter or digit)" (toString .)) }}
{{- end }}
{{- if hasKey $seen (toString .) }}
{{- fail (printf "sharding.shards: %q is listed twice" (toString .)) }}
{{- end }}
{{- $_ := set $seen (toString .) true }}
{{- end }}
{{- end }}

{{- define "pko.labels" -}}
helm.sh/chart: {{ include "pko.chart" . }}
{{ include "pko.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The operator's service account: created under the full name, or an existing one (default "default"). */}}
{{- define "pko.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pko.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Where workspace pods reach the Program file server (the Service below, port 80). */}}
{{- define "pko.advertisedAddress" -}}
{{- if .Values.controller.advertisedAddress }}
{{- .Values.controller.advertisedAddress }}
{{- else }}
{{- include "pko.objectName" (list . "service" "") }}{{ with .Shard }}-{{ . }}{{ end }}.$(POD_NAMESPACE)
{{- end }}
{{- end }}

{{/* One image is both the operator and the workspace agent (its `bootstrap` init container copies /agent). */}}
{{- define "pko.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion | toString }}
{{- if .Values.image.registry }}
{{- printf "%s/%s:%s" .Values.image.registry .Values.image.repository $tag }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* The manager's permissions (ClusterRole, or Role with rbac.createRole): the reference's, plus rbac.extraRules,
plus create/update of ConfigMaps and update of Secrets: a Stack's spec.outputs (docs/outputs.md) writes the
Secret/ConfigMap it owns (a create, or a PUT at the resourceVersion it checked).
plus reading StackApprovals and writing their status (pko, docs/approvals.md),
plus reading StackRollouts and writing their status (pko, docs/rollouts.md),
plus listing events: a workspace pod the API server refused to create is named only in its StatefulSet's
FailedCreate event, which the Workspace's status quotes (docs/troubleshooting.md). */}}
{{- define "pko.managerRules" -}}
{{- with .Values.rbac.extraRules }}
{{ toYaml . }}
{{- end }}
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create, get, list, update, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, list, patch, update]
- apiGroups: [""]
  resources: [pods, services]
  verbs: [create, delete, get, list, patch, update, watch]
- apiGroups: [""]
  resources: [secrets]
  verbs: [create, get, list, update, watch]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [create, delete, get, list, patch, update, watch]
- apiGroups: [auto.pulumi.com]
  resources: [updates, workspaces]
  verbs: [create, delete, get, list, patch, update, watch]
- apiGroups: [auto.pulumi.com]
  resources: [updates/finalizers, workspaces/finalizers]
  verbs: [update]
- apiGroups: [auto.pulumi.com]
  resources: [updates/status, workspaces/status]
  verbs: [get, patch, update]
- apiGroups: [auto.pulumi.com]
  resources: [workspaces/rpc]
  verbs: [use]
- apiGroups: [pulumi.com]
  resources: [programs, stacks]
  verbs: [create, delete, get, list, patch, update, watch]
- apiGroups: [pulumi.com]
  resources: [programs/finalizers, stacks/finalizers]
  verbs: [update]
- apiGroups: [pulumi.com]
  resources: [programs/status, stacks/status]
  verbs: [get, patch, update]
- apiGroups: [pulumi.com]
  resources: [stackapprovals, stackrollouts]
  verbs: [get, list, watch]
- apiGroups: [pulumi.com]
  resources: [stackapprovals/status, stackrollouts/status]
  verbs: [get, patch, update]
- apiGroups: [source.toolkit.fluxcd.io]
  resources: [buckets, gitrepositories, ocirepositories]
  verbs: [get, list, watch]
{{- end }}

{{/* An environment variable's value from a number or a string (YAML numbers arrive as float64: 1e+06 otherwise). */}}
{{- define "pko.envValue" -}}
{{- if kindIs "float64" . }}{{ int64 . | toString | quote }}{{ else }}{{ toString . | quote }}{{ end }}
{{- end }}
