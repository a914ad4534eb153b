{{/* Chart name, truncated to the 63 characters Kubernetes names allow. */}}
{{- define "lakewarden.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name. */}}
{{- define "lakewarden.fullname" -}}
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

{{- define "lakewarden.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "lakewarden.labels" -}}
helm.sh/chart: {{ include "lakewarden.chart" . }}
{{ include "lakewarden.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "lakewarden.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lakewarden.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The image; a component's own repository (e.g. the slim target) when it names one. */}}
{{- define "lakewarden.image" -}}
{{- $root := .root | default . }}
{{- $repo := $root.Values.image.repository }}
{{- with .component }}{{ with (index $root.Values .).image }}{{ $repo = . }}{{ end }}{{ end }}
{{- printf "%s:%s" $repo (default $root.Chart.AppVersion $root.Values.image.tag) }}
{{- end }}

{{- define "lakewarden.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lakewarden.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Secret and key holding LAKEWARDEN_DATABASE_URL. */}}
{{- define "lakewarden.databaseSecretName" -}}
{{- default (include "lakewarden.fullname" .) .Values.database.existingSecret }}
{{- end }}

{{- define "lakewarden.databaseSecretKey" -}}
{{- if .Values.database.existingSecret }}
{{- .Values.database.existingSecretKey }}
{{- else -}}
database-url
{{- end }}
{{- end }}

{{/* Non-secret LAKEWARDEN_* settings: the ConfigMap's data, and the migrate hook's env. */}}
{{- define "lakewarden.config" -}}
{{- if and .Values.spark.conf .Values.spark.confSecret.name }}
{{- fail "spark.conf and spark.confSecret exclude each other: put every setting in the Secret's JSON" }}
{{- end }}
LAKEWARDEN_WAREHOUSE: {{ .Values.warehouse | quote }}
LAKEWARDEN_CATALOG_NAME: {{ .Values.catalogName | quote }}
LAKEWARDEN_CATALOG_TYPE: {{ .Values.catalog.type | quote }}
{{- with .Values.catalog.properties }}
LAKEWARDEN_CATALOG_PROPERTIES: {{ toJson . | quote }}
{{- end }}
{{- if or (eq .Values.catalog.type "rest") (eq .Values.catalog.type "hive") }}
LAKEWARDEN_CATALOG_URI: {{ required (printf "catalog.uri is required for a %s catalog" .Values.catalog.type) .Values.catalog.uri | quote }}
{{- end }}
LAKEWARDEN_LOG_LEVEL: {{ .Values.logLevel | quote }}
LAKEWARDEN_LOG_FORMAT: {{ .Values.logFormat | quote }}
LAKEWARDEN_SPARK_MASTER: {{ .Values.spark.master | quote }}
LAKEWARDEN_SPARK_DRIVER_MEMORY: {{ .Values.spark.driverMemory | quote }}
{{- with .Values.spark.jars }}
LAKEWARDEN_SPARK_JARS: {{ . | quote }}
{{- end }}
{{- with .Values.spark.packages }}
LAKEWARDEN_SPARK_PACKAGES: {{ . | quote }}
{{- end }}
{{- with .Values.spark.conf }}
LAKEWARDEN_SPARK_CONF: {{ toJson . | quote }}
{{- end }}
LAKEWARDEN_SPARK_UI_ENABLED: {{ .Values.spark.ui.enabled | quote }}
LAKEWARDEN_SPARK_UI_PORT: {{ .Values.spark.ui.port | quote }}
{{- with .Values.spark.eventLogDir }}
LAKEWARDEN_SPARK_EVENT_LOG_DIR: {{ . | quote }}
{{- end }}
{{- with .Values.spark.historyUrl }}
LAKEWARDEN_SPARK_HISTORY_URL: {{ . | quote }}
{{- end }}
LAKEWARDEN_SPARK_LOG_RETENTION_DAYS: {{ .Values.spark.logRetentionDays | quote }}
{{- with .Values.spark.poolModes }}
LAKEWARDEN_POOL_MODES: {{ toJson . | quote }}
{{- end }}
{{- with .Values.spark.applications }}
{{- if .master }}
LAKEWARDEN_APPLICATION_MASTER: {{ .master | quote }}
{{- end }}
LAKEWARDEN_APPLICATION_DEPLOY_MODE: {{ .deployMode | quote }}
LAKEWARDEN_APPLICATION_DRIVER_MEMORY: {{ .driverMemory | quote }}
LAKEWARDEN_MAX_CONCURRENT_APPLICATIONS: {{ .maxConcurrent | quote }}
{{- with .masterWebUrl }}
LAKEWARDEN_SPARK_MASTER_WEB_URL: {{ . | quote }}
{{- end }}
{{- end }}
{{- if or (eq .Values.spark.master "yarn") (eq .Values.spark.applications.master "yarn") }}
{{- if not (or .Values.hadoop.conf .Values.hadoop.existingConfigMap) }}
{{- fail "a yarn master needs the cluster's yarn-site.xml: give hadoop.conf or hadoop.existingConfigMap" }}
{{- end }}
LAKEWARDEN_YARN_RESOURCEMANAGER_URL: {{ required "spark.yarn.resourceManagerUrl is required with a yarn master (its REST API: status, diagnostics, kill)" .Values.spark.yarn.resourceManagerUrl | quote }}
{{- end }}
LAKEWARDEN_MAX_CONCURRENT_JOBS: {{ .Values.scheduler.maxConcurrentJobs | quote }}
{{- with .Values.scheduler.regions }}
{{- $names := list "default" }}
{{- range . }}{{ $names = append $names .name }}{{ end }}
LAKEWARDEN_REGIONS: {{ toJson $names | quote }}
{{- end }}
{{- with .Values.scheduler.poolLimits }}
LAKEWARDEN_POOL_LIMITS: {{ toJson . | quote }}
{{- end }}
{{- with .Values.scheduler.poolCapacity }}
LAKEWARDEN_POOL_CAPACITY: {{ toJson . | quote }}
{{- end }}
{{- with .Values.scheduler.poolQuotas }}
LAKEWARDEN_POOL_QUOTAS: {{ toJson . | quote }}
{{- end }}
LAKEWARDEN_METRICS_PUBLIC: {{ .Values.metrics.public | quote }}
LAKEWARDEN_METRICS_MAX_TABLES: {{ .Values.metrics.maxTables | quote }}
{{- with .Values.alerts.intervalS }}
LAKEWARDEN_ALERT_INTERVAL_S: {{ . | quote }}
{{- end }}
{{- with .Values.alerts.backlogAgeS }}
LAKEWARDEN_ALERT_BACKLOG_AGE_S: {{ . | quote }}
{{- end }}
{{- with .Values.alerts.noLeaderS }}
LAKEWARDEN_ALERT_NO_LEADER_S: {{ . | quote }}
{{- end }}
{{- with .Values.alerts.resendIntervalS }}
LAKEWARDEN_ALERT_RESEND_INTERVAL_S: {{ . | quote }}
{{- end }}
LAKEWARDEN_DATA_DIR: /var/lib/lakewarden
LAKEWARDEN_JARS_CACHE_DIR: /var/lib/lakewarden/jars
{{- end }}

{{/* Settings that come from Secrets: the database URL, and the optional ones. */}}
{{- define "lakewarden.secretEnv" -}}
{{- $root := .root }}
- name: LAKEWARDEN_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .databaseSecret }}
      key: {{ include "lakewarden.databaseSecretKey" $root }}
{{- with $root.Values.catalog.databaseSecret }}{{ if .name }}
- name: LAKEWARDEN_CATALOG_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ required "catalog.databaseSecret.key is required" .key }}
{{- end }}{{ end }}
{{- range $sink, $env := dict "webhook" "LAKEWARDEN_ALERT_WEBHOOK_URL" "slack" "LAKEWARDEN_ALERT_SLACK_URL" "alertmanager" "LAKEWARDEN_ALERT_ALERTMANAGER_URL" }}
{{- with index $root.Values.alerts $sink }}{{ if .secretName }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: {{ required (printf "alerts.%s.secretKey is required" $sink) .secretKey }}
{{- end }}{{ end }}
{{- end }}
{{- with $root.Values.spark.confSecret }}{{ if .name }}
- name: LAKEWARDEN_SPARK_CONF
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ required "spark.confSecret.key is required" .key }}
{{- end }}{{ end }}
{{- end }}

{{/* Environment shared by every long-running lakewarden container. */}}
{{- define "lakewarden.env" -}}
envFrom:
  - configMapRef:
      name: {{ include "lakewarden.fullname" . }}
  {{- with .Values.extraEnvFrom }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
env:
  {{- include "lakewarden.secretEnv" (dict "root" . "databaseSecret" (include "lakewarden.databaseSecretName" .)) | nindent 2 }}
  {{- if or .Values.hadoop.conf .Values.hadoop.existingConfigMap }}
  - name: HADOOP_CONF_DIR
    value: /etc/hadoop/conf
  - name: YARN_CONF_DIR
    value: /etc/hadoop/conf
  {{- end }}
  {{- with .Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/* The ConfigMap of Hadoop client files the pods mount (hadoop.conf, or one of the user's). */}}
{{- define "lakewarden.hadoopConfigMap" -}}
{{- .Values.hadoop.existingConfigMap | default (printf "%s-hadoop" (include "lakewarden.fullname" .)) -}}
{{- end }}

{{/* Pod-level fields shared by every workload: (dict "root" . "component" "api"). */}}
{{/* The regions' schedulers (docs/deployment.md#regions), as a YAML list: the default
region's first (scheduler.replicas), then each entry of scheduler.regions. */}}
{{- define "lakewarden.schedulerRegions" -}}
{{- $out := list (dict "name" "default" "replicas" .Values.scheduler.replicas) }}
{{- range .Values.scheduler.regions }}
{{- if not (regexMatch "^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$" .name) }}
{{- fail (printf "scheduler.regions: %q is not a region name (1-32 lowercase letters, digits or dashes)" .name) }}
{{- end }}
{{- if eq .name "default" }}
{{- fail "scheduler.regions: the default region's schedulers are scheduler.replicas; list only the other regions" }}
{{- end }}
{{- $out = append $out (dict "name" .name "replicas" (ternary .replicas $.Values.scheduler.replicas (hasKey . "replicas")) "nodeSelector" (.nodeSelector | default dict) "tolerations" (.tolerations | default list)) }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{- define "lakewarden.podSpecCommon" -}}
{{- $root := .root }}
serviceAccountName: {{ include "lakewarden.serviceAccountName" $root }}
{{- /* Only a scheduler that drives Spark on Kubernetes talks to the API server. */}}
automountServiceAccountToken: {{ and (hasPrefix "scheduler" .component) $root.Values.spark.kubernetes.enabled }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
{{- /* A region's schedulers may be pinned to its data center (scheduler.regions). */}}
{{- with (.nodeSelector | default $root.Values.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.tolerations | default $root.Values.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if and $root.Values.topologySpread.enabled (ne .component "migrate") }}
topologySpreadConstraints:
  {{- range $root.Values.topologySpread.topologyKeys }}
  - maxSkew: {{ $root.Values.topologySpread.maxSkew }}
    topologyKey: {{ . }}
    whenUnsatisfiable: {{ $root.Values.topologySpread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "lakewarden.selectorLabels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ $.component }}
  {{- end }}
{{- end }}
{{- end }}

{{/* Volumes: the warehouse, and an emptyDir for every path written under a read-only root. */}}
{{- define "lakewarden.volumes" -}}
volumes:
  - name: warehouse
    {{- if .Values.warehouseVolume.existingClaim }}
    persistentVolumeClaim:
      claimName: {{ .Values.warehouseVolume.existingClaim }}
    {{- else }}
    emptyDir: {}
    {{- end }}
  - name: data
    emptyDir: {}
  - name: tmp
    emptyDir: {}
  - name: home
    emptyDir: {}
  {{- if or .Values.hadoop.conf .Values.hadoop.existingConfigMap }}
  - name: hadoop-conf
    configMap:
      name: {{ include "lakewarden.hadoopConfigMap" . }}
  {{- end }}
  {{- with .Values.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{- define "lakewarden.volumeMounts" -}}
volumeMounts:
  - name: warehouse
    mountPath: /warehouse
  # the data dir and the jar cache (LAKEWARDEN_JARS_CACHE_DIR)
  - name: data
    mountPath: /var/lib/lakewarden
  # Spark's local dir (spark.local.dir defaults to /tmp), Python's temporary files
  - name: tmp
    mountPath: /tmp
  # Ivy's cache (~/.ivy2) when spark.packages are resolved, and ~/.cache
  - name: home
    mountPath: /home/lakewarden
  {{- if or .Values.hadoop.conf .Values.hadoop.existingConfigMap }}
  - name: hadoop-conf
    mountPath: /etc/hadoop/conf
    readOnly: true
  {{- end }}
  {{- with .Values.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/* Probes of a process without an HTTP port: its heartbeat (`lakewarden check`). */}}
{{- define "lakewarden.heartbeatProbes" -}}
# Until the first heartbeat (the scheduler may warm Spark first): up to 5 minutes.
startupProbe:
  exec:
    command: ["lakewarden", "check", "--role", "{{ . }}"]
  periodSeconds: 10
  timeoutSeconds: 10
  failureThreshold: 30
readinessProbe:
  exec:
    command: ["lakewarden", "check", "--role", "{{ . }}"]
  periodSeconds: 15
  timeoutSeconds: 10
  failureThreshold: 2
# A database outage passes (--liveness): restarting every pod would not end it.
livenessProbe:
  exec:
    command: ["lakewarden", "check", "--role", "{{ . }}", "--liveness"]
  periodSeconds: 30
  timeoutSeconds: 10
  failureThreshold: 3
{{- end }}

{{/* Pod annotations that roll the pods when configuration changes. */}}
{{- define "lakewarden.podAnnotations" -}}
checksum/config: {{ include "lakewarden.config" . | sha256sum }}
{{- if not .Values.database.existingSecret }}
checksum/secret: {{ .Values.database.url | sha256sum }}
{{- end }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}
