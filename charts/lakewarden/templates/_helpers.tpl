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

{{- define "lakewarden.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
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
LAKEWARDEN_WAREHOUSE: {{ .Values.warehouse | quote }}
LAKEWARDEN_CATALOG_NAME: {{ .Values.catalogName | quote }}
LAKEWARDEN_LOG_LEVEL: {{ .Values.logLevel | quote }}
LAKEWARDEN_SPARK_MASTER: {{ .Values.spark.master | quote }}
{{- with .Values.spark.jars }}
LAKEWARDEN_SPARK_JARS: {{ . | quote }}
{{- end }}
{{- with .Values.spark.packages }}
LAKEWARDEN_SPARK_PACKAGES: {{ . | quote }}
{{- end }}
LAKEWARDEN_DATA_DIR: /var/lib/lakewarden
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
  - name: LAKEWARDEN_DATABASE_URL
    valueFrom:
      secretKeyRef:
        name: {{ include "lakewarden.databaseSecretName" . }}
        key: {{ include "lakewarden.databaseSecretKey" . }}
  {{- with .Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/* Pod-level fields shared by every workload. */}}
{{- define "lakewarden.podSpecCommon" -}}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Volumes for pods that touch the warehouse and the local data dir. */}}
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
{{- end }}

{{- define "lakewarden.volumeMounts" -}}
volumeMounts:
  - name: warehouse
    mountPath: /warehouse
  - name: data
    mountPath: /var/lib/lakewarden
  - name: tmp
    mountPath: /tmp
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
