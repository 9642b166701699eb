{{/* The release's base name: the release name, capped at 52 characters (room for suffixes). */}}
{{- define "kuvryn-sync.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kuvryn-sync.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kuvryn-sync.labels" -}}
{{ include "kuvryn-sync.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kuvryn-sync
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kuvryn-sync.serviceAccountName" -}}
{{- default (include "kuvryn-sync.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "kuvryn-sync.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "kuvryn-sync.certManager" -}}
{{- and .Values.webhooks.enabled (eq .Values.webhooks.certificate.source "certManager") -}}
{{- end -}}
