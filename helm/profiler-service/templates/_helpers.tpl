{{/*
Named templates. The ones marked "public" are meant for charts that own their pod spec (training.kind
none): call them with a context whose .Values are this chart's values and .Release the release:

  {{- $profiler := dict "Values" (index .Values "profiler-service") "Release" .Release }}
  initContainers:
    {{- include "profiler-service.sidecar" $profiler | nindent 4 }}
  containers:
    - name: trainer
      env: {{- include "profiler-service.trainingEnv" $profiler | nindent 8 }}
      volumeMounts: {{- include "profiler-service.storeMount" $profiler | nindent 8 }}
  volumes: {{- include "profiler-service.volumes" $profiler | nindent 4 }}

and give the pod the labels of "profiler-service.selectorLabels" (the Service and monitors select
them). They use no .Chart, so they work from a parent chart as they are.
*/}}

{{- define "profiler-service.fullname" -}}
{{- if contains "profiler" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-profiler" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* public: the labels the pod must carry */}}
{{- define "profiler-service.selectorLabels" -}}
app.kubernetes.io/name: profiler-service
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The hub's pods: a name of their own, so the sidecar's Service and monitors never select
them (both listen on 8080). */}}
{{- define "profiler-service.hubSelectorLabels" -}}
app.kubernetes.io/name: profiler-service-hub
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: hub
{{- end -}}

{{- define "profiler-service.labels" -}}
{{ include "profiler-service.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "profiler-service.image" -}}
{{- /* a literal: other charts include this template without this chart's .Chart */ -}}
{{- $tag := .Values.image.tag | default "0.2.0" -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{- define "profiler-service.secretName" -}}
{{- .Values.secret.existingSecret | default (include "profiler-service.fullname" .) -}}
{{- end -}}

{{- define "profiler-service.usesSecret" -}}
{{- if or .Values.secret.create .Values.secret.existingSecret }}true{{ end -}}
{{- end -}}

{{/* The namespace of the hub the sidecar registers with: networkPolicy.hubNamespace, else the
one hub.url names (name.NAMESPACE.svc...), else the release's. */}}
{{- define "profiler-service.hubNamespace" -}}
{{- $host := "" -}}
{{- if .Values.hub.url -}}
{{- $host = regexReplaceAll ":[0-9]+$" (urlParse .Values.hub.url).host "" -}}
{{- end -}}
{{- $parts := splitList "." $host -}}
{{- $named := .Release.Namespace -}}
{{- if gt (len $parts) 1 -}}
{{- $named = index $parts 1 -}}
{{- end -}}
{{- .Values.networkPolicy.hubNamespace | default $named -}}
{{- end -}}

{{- define "profiler-service.claimName" -}}
{{- .Values.store.persistentVolumeClaim.existingClaim | default (printf "%s-store" (include "profiler-service.fullname" .)) -}}
{{- end -}}

{{- define "profiler-service.xprofUrl" -}}
{{- if .Values.xprof.url -}}
{{- .Values.xprof.url -}}
{{- else -}}
{{- printf "http://%s-xprof.%s.svc:%d" (include "profiler-service.fullname" .) .Release.Namespace (int .Values.xprof.port) -}}
{{- end -}}
{{- end -}}

{{/* The hub sidecars register with: hub.url, else this release's hub when enabled. */}}
{{- define "profiler-service.hubUrl" -}}
{{- if .Values.hub.url -}}
{{- .Values.hub.url -}}
{{- else if .Values.hub.enabled -}}
{{- printf "http://%s-hub.%s.svc:%d" (include "profiler-service.fullname" .) .Release.Namespace (int .Values.hub.port) -}}
{{- end -}}
{{- end -}}

{{/* public: the shared volume's mount, the same absolute path in both containers */}}
{{- define "profiler-service.storeMount" -}}
- name: profiler-store
  mountPath: {{ .Values.store.mountPath }}
{{- end -}}

{{/* public: the pod's volumes for the sidecar (the store, and a writable /tmp) */}}
{{- define "profiler-service.volumes" -}}
- name: profiler-store
{{- if eq .Values.store.type "persistentVolumeClaim" }}
  persistentVolumeClaim:
    claimName: {{ include "profiler-service.claimName" . }}
{{- else }}
  emptyDir:
    {{- with .Values.store.emptyDir.sizeLimit }}
    sizeLimit: {{ . }}
    {{- end }}
{{- end }}
- name: profiler-tmp
  emptyDir:
    sizeLimit: 1Gi
{{- end -}}

{{/* public: environment for the training container (which port to serve the profiler on) */}}
{{- define "profiler-service.trainingEnv" -}}
- name: {{ .Values.training.profilerPortEnv }}
  value: {{ .Values.training.profilerPort | quote }}
{{- if .Values.training.metricsPort }}
- name: {{ .Values.training.metricsPortEnv }}
  value: {{ .Values.training.metricsPort | quote }}
# The PodMonitor scrapes it on the pod's address; the sidecar reads it over localhost.
- {name: PROFILER_JOB_METRICS_ADDR, value: "0.0.0.0"}
{{- end }}
{{- end -}}

{{- define "profiler-service.secretEnv" -}}
{{- $name := include "profiler-service.secretName" . -}}
{{- range $env, $key := dict "PROFILER_WEBHOOK_TOKEN" "webhook-token" "PROFILER_WEBHOOK_USERNAME" "webhook-username" "PROFILER_WEBHOOK_PASSWORD" "webhook-password" "PROFILER_WEBHOOK_HMAC_SECRET" "webhook-hmac-secret" "PROFILER_GRAFANA_TOKEN" "grafana-token" "PROFILER_STORE_OPTIONS" "store-options" "PROFILER_HUB_TOKEN" "hub-token" }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef: {name: {{ $name }}, key: {{ $key }}, optional: true}
{{- end }}
{{- end -}}

{{/* public: the sidecar container, one list item (an init container when sidecar.native) */}}
{{- define "profiler-service.sidecar" -}}
{{- $values := .Values -}}
- name: profiler-service
  image: {{ include "profiler-service.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if .Values.sidecar.native }}
  restartPolicy: Always
  {{- end }}
  args: [serve]
  ports:
    - {name: http, containerPort: {{ .Values.sidecar.port }}, protocol: TCP}
  env:
    - {name: PROFILER_HOST, value: "0.0.0.0"}
    - {name: PROFILER_PORT, value: {{ .Values.sidecar.port | quote }}}
    - {name: PROFILER_STORE, value: {{ .Values.store.mountPath | quote }}}
    - name: PROFILER_TARGETS
      {{- if .Values.targetDiscovery }}
      value: {{ printf "%s=%s" .Values.targetName .Values.targetDiscovery | quote }}
      {{- else }}
      value: {{ printf "%s=grpc://127.0.0.1:%d" .Values.targetName (int .Values.training.profilerPort) | quote }}
      {{- end }}
    - {name: HOME, value: /tmp}
    # $pod and $namespace in the Prometheus lead-up queries.
    - name: PROFILER_POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: PROFILER_POD_NAMESPACE
      valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
    # The job, as the fleet hub tells jobs apart (every release's target is `trainer`).
    {{- $workload := .Values.workload | default dict }}
    - name: PROFILER_WORKLOAD
      {{- if $workload.fromLabel }}
      valueFrom: {fieldRef: {fieldPath: {{ printf "metadata.labels['%s']" $workload.fromLabel | quote }}}}
      {{- else }}
      value: {{ $workload.name | default .Release.Name | quote }}
      {{- end }}
    {{- with include "profiler-service.hubUrl" . }}
    # The fleet hub: it dials this pod at its IP (never an address found in an alert).
    - {name: PROFILER_HUB_URL, value: {{ . | quote }}}
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    - {name: PROFILER_HUB_ADVERTISE_URL, value: {{ printf "http://$(POD_IP):%d" (int $values.sidecar.port) | quote }}}
    {{- end }}
    {{- with .Values.sidecar.watchProcess }}
    - {name: PROFILER_WATCH_PROCESS, value: {{ . | quote }}}
    {{- end }}
    {{- if .Values.sidecar.pySpy.enabled }}
    - {name: PROFILER_PY_SPY, value: "true"}
    {{- end }}
    {{- if and .Values.training.metricsPort (not (hasKey .Values.sidecar.settings "job_metrics_url")) }}
    # The job's step timings (what a capture cost it), from its own /metrics.
    - {name: PROFILER_JOB_METRICS_URL, value: {{ printf "http://127.0.0.1:%d/metrics" (int .Values.training.metricsPort) | quote }}}
    {{- end }}
    {{- if and .Values.xprof.enabled (not (hasKey .Values.sidecar.settings "tensorboard_url")) }}
    - {name: PROFILER_TENSORBOARD_URL, value: {{ include "profiler-service.xprofUrl" . | quote }}}
    {{- end }}
    {{- with .Values.sidecar.publicUrl }}
    - {name: PROFILER_PUBLIC_URL, value: {{ . | quote }}}
    {{- end }}
    {{- if .Values.sidecar.insecure }}
    - {name: PROFILER_INSECURE, value: "true"}
    {{- end }}
    {{- if include "profiler-service.usesSecret" . }}
    - name: PROFILER_API_TOKEN
      valueFrom:
        secretKeyRef: {name: {{ include "profiler-service.secretName" . }}, key: api-token}
    {{- include "profiler-service.secretEnv" . | nindent 4 }}
    {{- end }}
    {{- range $name, $value := .Values.sidecar.settings }}
    - name: {{ printf "PROFILER_%s" (upper $name) }}
      value: {{ kindIs "string" $value | ternary $value (toJson $value) | quote }}
    {{- end }}
    {{- with .Values.sidecar.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  volumeMounts:
    {{- include "profiler-service.storeMount" . | nindent 4 }}
    - {name: profiler-tmp, mountPath: /tmp}
  livenessProbe:
    httpGet: {path: /healthz, port: http}
    {{- toYaml .Values.sidecar.livenessProbe | nindent 4 }}
  readinessProbe:
    httpGet: {path: /readyz, port: http}
    {{- toYaml .Values.sidecar.readinessProbe | nindent 4 }}
  resources:
    {{- toYaml .Values.sidecar.resources | nindent 4 }}
  securityContext:
    {{- if .Values.sidecar.pySpy.enabled }}
    {{- $ptrace := dict "allowPrivilegeEscalation" true "capabilities" (dict "drop" (list "ALL") "add" (list "SYS_PTRACE")) }}
    {{- toYaml (merge $ptrace (deepCopy .Values.securityContext)) | nindent 4 }}
    {{- else }}
    {{- toYaml .Values.securityContext | nindent 4 }}
    {{- end }}
{{- end -}}

{{/* The pod spec of the chart's own workload: the training container and the sidecar. */}}
{{- define "profiler-service.podSpec" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.training.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
{{- if or .Values.sidecar.watchProcess .Values.sidecar.pySpy.enabled }}
# The sidecar reads the job's /proc: its RSS and cgroup limit (the memory watch), its Python
# stacks (py-spy).
shareProcessNamespace: true
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- if .Values.sidecar.native }}
initContainers:
  {{- include "profiler-service.sidecar" . | nindent 2 }}
{{- end }}
containers:
  - name: training
    image: {{ .Values.training.image }}
    imagePullPolicy: {{ .Values.training.imagePullPolicy }}
    {{- with .Values.training.command }}
    command:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with .Values.training.args }}
    args:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    env:
      {{- include "profiler-service.trainingEnv" . | nindent 6 }}
      {{- with .Values.training.env }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- if .Values.training.metricsPort }}
    ports:
      - {name: job-metrics, containerPort: {{ .Values.training.metricsPort }}, protocol: TCP}
    {{- end }}
    volumeMounts:
      {{- include "profiler-service.storeMount" . | nindent 6 }}
    {{- with .Values.training.resources }}
    resources:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with .Values.training.securityContext }}
    securityContext:
      {{- toYaml . | nindent 6 }}
    {{- end }}
  {{- if not .Values.sidecar.native }}
  {{- include "profiler-service.sidecar" . | nindent 2 }}
  {{- end }}
volumes:
  {{- include "profiler-service.volumes" . | nindent 2 }}
{{- with .Values.training.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.training.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.training.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "profiler-service.podMetadata" -}}
labels:
  {{- include "profiler-service.selectorLabels" . | nindent 2 }}
  {{- with .Values.training.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- if or .Values.metrics.scrapeAnnotations .Values.training.podAnnotations }}
annotations:
  {{- if .Values.metrics.scrapeAnnotations }}
  prometheus.io/scrape: "true"
  prometheus.io/port: {{ .Values.sidecar.port | quote }}
  prometheus.io/path: /metrics
  {{- end }}
  {{- with .Values.training.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end -}}
