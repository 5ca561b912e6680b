{{/* The chart's name, overridable. */}}
{{- define "dagline.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: "<release>-dagline", or the release alone when it already says dagline. */}}
{{- define "dagline.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "dagline.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "dagline.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "dagline.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dagline.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "dagline.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{ include "dagline.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "dagline.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "dagline.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "dagline.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The namespace the operator watches: "" (all) or one namespace. */}}
{{- define "dagline.watchNamespace" -}}
{{- if .Values.watch.allNamespaces -}}
{{- else -}}
{{- default .Release.Namespace .Values.watch.namespace -}}
{{- end -}}
{{- end -}}

{{/* Where Spark runs: a namespace of its own ("<release namespace>-spark" by default), never the release
namespace, which holds the database Secret (ADR 0046). */}}
{{- define "dagline.sparkNamespace" -}}
{{- $namespace := default (printf "%s-spark" .Release.Namespace) .Values.spark.namespace -}}
{{- if eq $namespace .Release.Namespace -}}
{{- fail (printf "spark.namespace: %q is the release namespace, beside the database Secret; Spark jobs run DAG authors' code and must run in a namespace of their own (leave it empty for %q)" $namespace (printf "%s-spark" .Release.Namespace)) -}}
{{- end -}}
{{- $namespace -}}
{{- end -}}

{{/* The database URL, from the Secret named in values (never stored in the chart). */}}
{{- define "dagline.databaseEnv" -}}
- name: DAGLINE_DB_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.secretName | quote }}
      key: {{ .Values.database.secretKey | quote }}
{{- end -}}

{{/* The API's address inside the cluster, as task tries reach it. */}}
{{- define "dagline.apiUrl" -}}
{{- if .Values.api.url -}}
{{- .Values.api.url -}}
{{- else -}}
{{- printf "http://%s-api.%s.svc:%v" (include "dagline.fullname" .) .Release.Namespace .Values.api.service.port -}}
{{- end -}}
{{- end -}}
