{{/* The operator's Deployment, once for the main operator (`.Shard` empty) and once per shard of
`sharding.shards` (deployment.yaml renders it; pko.shardSelector tells their pods apart). */}}
{{- define "pko.deployment" -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "pko.objectName" (list . "deployment" "-controller-manager") }}{{ with .Shard }}-{{ . }}{{ end }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "pko.labels" . | nindent 4 }}
  {{- with .Values.deploymentAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  replicas: {{ .Values.replicaCount }}
  strategy:
    type: {{ default "RollingUpdate" .Values.deploymentStrategy }}
  selector:
    matchLabels:
      {{- include "pko.shardSelector" . | nindent 6 }}
  template:
    metadata:
      annotations:
        kubectl.kubernetes.io/default-container: manager
        {{- with .Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      labels:
        {{- if .Shard }}
        {{- include "pko.shardSelector" . | nindent 8 }}
        {{- else }}
        {{- include "pko.selectorLabels" . | nindent 8 }}
        {{- with .Values.selectorLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- end }}
        {{- with .Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "pko.serviceAccountName" . }}
      {{- with .Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if .Values.terminationGracePeriodSeconds }}
      terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
      {{- end }}
      {{- with .Values.podSecurityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.initContainers }}
      initContainers:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: manager
          image: {{ include "pko.image" . | quote }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          # The image's entrypoint is tini; these replace its CMD (`pko operator`).
          args:
            - pko
            - operator
            - --leader-elect
            - --health-probe-bind-address=:8081
            - --metrics-bind-address=:8383
            - --metrics-secure={{ .Values.controller.metricsSecure }}
            - --program-fs-addr=:9090
            - --program-fs-adv-addr={{ include "pko.advertisedAddress" . }}:80
            - --zap-log-level={{ .Values.controller.logLevel }}
            - --zap-encoder={{ .Values.controller.logFormat }}
            - --zap-time-encoding=iso8601
            {{- if .Shard }}
            - --shard-key={{ .Shard }}
            {{- else if .Values.sharding.shards }}
            - --watch-label-selector=!sharding.fluxcd.io/key
            {{- end }}
          env:
            {{- with .Values.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: POD_SA_NAME
              valueFrom:
                fieldRef:
                  fieldPath: spec.serviceAccountName
            - name: AGENT_IMAGE
              value: {{ include "pko.image" . | quote }}
            - name: AGENT_IMAGE_PULL_POLICY
              value: {{ .Values.image.pullPolicy | quote }}
            {{- with .Values.leaderElection.leaseDuration }}
            - name: LEADER_ELECTION_LEASE_DURATION
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- with .Values.leaderElection.renewDeadline }}
            - name: LEADER_ELECTION_RENEW_DEADLINE
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- with .Values.leaderElection.retryPeriod }}
            - name: LEADER_ELECTION_RETRY_PERIOD
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- with .Values.kubeAPI.timeout }}
            - name: KUBE_API_TIMEOUT
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- with .Values.kubeAPI.qps }}
            - name: KUBE_API_QPS
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- with .Values.kubeAPI.burst }}
            - name: KUBE_API_BURST
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- with .Values.flux.maxUntarSizeBytes }}
            - name: FLUX_MAX_UNTAR_SIZE_BYTES
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- with .Values.controller.maxConcurrentReconciles }}
            - name: MAX_CONCURRENT_RECONCILES
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- with .Values.controller.maxConcurrentUpdates }}
            - name: MAX_CONCURRENT_UPDATES
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- /* 0 is a value here (stall at the first failure): only empty leaves the default */}}
            {{- if ne (toString .Values.controller.maxUpdateFailures) "" }}
            - name: MAX_UPDATE_FAILURES
              value: {{ include "pko.envValue" .Values.controller.maxUpdateFailures }}
            {{- end }}
            {{- with .Values.controller.retryBackoffBase }}
            - name: RETRY_BACKOFF_BASE
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- with .Values.controller.retryBackoffFactor }}
            - name: RETRY_BACKOFF_FACTOR
              value: {{ toString . | quote }}{{/* not envValue: a factor may be fractional (1.5) */}}
            {{- end }}
            {{- with .Values.controller.retryMaxBackoff }}
            - name: RETRY_MAX_BACKOFF_DURATION
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- with .Values.controller.stalledRetryInterval }}
            - name: STALLED_RETRY_INTERVAL
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- with .Values.controller.minResyncFrequency }}
            - name: MIN_RESYNC_FREQUENCY
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- with .Values.controller.workspaceIdleTimeout }}
            - name: WORKSPACE_IDLE_TIMEOUT
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- if ne (toString .Values.controller.updateIdleTimeout) "" }}
            - name: UPDATE_IDLE_TIMEOUT
              value: {{ include "pko.envValue" .Values.controller.updateIdleTimeout }}
            {{- end }}
            {{- if ne (toString .Values.controller.updateTimeout) "" }}
            - name: UPDATE_TIMEOUT
              value: {{ include "pko.envValue" .Values.controller.updateTimeout }}
            {{- end }}
            {{- if ne (toString .Values.controller.maxActiveWorkspaces) "" }}
            {{- if lt (int .Values.controller.maxActiveWorkspaces) 1 }}
            {{- fail (printf "controller.maxActiveWorkspaces must be at least 1, not %v (leave it empty for no bound)" .Values.controller.maxActiveWorkspaces) }}
            {{- end }}
            - name: MAX_ACTIVE_WORKSPACES
              value: {{ include "pko.envValue" .Values.controller.maxActiveWorkspaces }}
            {{- end }}
            {{- with .Values.controller.workspaceShareVolume.size }}
            - name: WORKSPACE_SHARE_VOLUME_SIZE
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- with .Values.controller.workspaceShareVolume.storageClass }}
            - name: WORKSPACE_SHARE_VOLUME_STORAGE_CLASS
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- if .Values.dependencyCache.upstreams }}
            - name: DEPENDENCY_CACHE_UPSTREAMS
              value: {{ .Values.dependencyCache.upstreams | quote }}
            - name: DEPENDENCY_CACHE_DIR
              value: /var/cache/pko
            - name: DEPENDENCY_CACHE_SIZE
              value: {{ .Values.dependencyCache.size | quote }}
            {{- with .Values.dependencyCache.indexTTL }}
            - name: DEPENDENCY_CACHE_INDEX_TTL
              value: {{ include "pko.envValue" . }}
            {{- end }}
            {{- end }}
            {{- if ne (toString .Values.controller.workspaceAgentImageVolume) "" }}
            - name: WORKSPACE_AGENT_IMAGE_VOLUME
              value: {{ toString .Values.controller.workspaceAgentImageVolume | quote }}
            {{- end }}
            {{- if ne (toString .Values.controller.workspaceConfigInPlace) "" }}
            - name: WORKSPACE_CONFIG_IN_PLACE
              value: {{ toString .Values.controller.workspaceConfigInPlace | quote }}
            {{- end }}
          ports:
            - name: http-metrics
              containerPort: 8383
              protocol: TCP
            - name: http-fileserver
              containerPort: 9090
              protocol: TCP
            {{- with .Values.extraPorts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- with .Values.livenessProbe }}
          livenessProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with .Values.readinessProbe }}
          readinessProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with .Values.securityContext }}
          securityContext:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with .Values.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- if or .Values.extraVolumeMounts .Values.dependencyCache.upstreams }}
          volumeMounts:
            {{- if .Values.dependencyCache.upstreams }}
            - name: dependency-cache
              mountPath: /var/cache/pko
            {{- end }}
            {{- with .Values.extraVolumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- end }}
        {{- with .Values.extraSidecars }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with .Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if or .Values.extraVolumes .Values.dependencyCache.upstreams }}
      volumes:
        {{- if .Values.dependencyCache.upstreams }}
        - name: dependency-cache
          emptyDir:
            sizeLimit: {{ .Values.dependencyCache.size | quote }}
        {{- end }}
        {{- with .Values.extraVolumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
{{- end }}
