{{/* Labels on every object: the kustomize tree's part-of, plus Helm's standard ones. */}}
{{- define "orch.labels" -}}
app.kubernetes.io/part-of: sla-orchestrator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* An image reference: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "orch.image" -}}
{{- $img := index .root.Values.image .which -}}
{{- printf "%s:%s" $img.repository (default .root.Chart.AppVersion $img.tag) -}}
{{- end }}

{{/* REDIS_PASSWORD from its Secret, then REDIS_URL composed by Kubernetes from it ($(VAR)
expands only for a VAR defined earlier in the list): the password is never in a manifest. */}}
{{- define "orch.redisEnv" -}}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ .Values.secrets.redisPassword.name }}, key: {{ .Values.secrets.redisPassword.key }}}
- name: REDIS_URL
  value: "redis://:$(REDIS_PASSWORD)@orch-redis:6379/0"
{{- end }}

{{/* Ray token authentication: every Ray container and the Ray client present the token. */}}
{{- define "orch.rayAuthEnv" -}}
- name: RAY_AUTH_MODE
  value: token
- name: RAY_AUTH_TOKEN
  valueFrom:
    secretKeyRef: {name: {{ .Values.secrets.rayToken.name }}, key: {{ .Values.secrets.rayToken.key }}}
{{- end }}

{{/* The environment of every Ray container (head and workers). */}}
{{- define "orch.rayEnv" -}}
{{ include "orch.rayAuthEnv" . }}
{{ include "orch.redisEnv" . }}
- name: ORCH_NAMESPACE
  value: {{ .Values.orchestrator.namespace | quote }}
- name: ORCH_DATA_DIR
  value: /shared/orch
{{- end }}

{{/* The shared checkpoint volume, as a pod's volume. */}}
{{- define "orch.sharedVolume" -}}
- name: shared
  persistentVolumeClaim: {claimName: orch-shared}
{{- end }}

{{- define "orch.pullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
