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

{{/* The security context of the container that runs teams' code (the Ray workers; see
docs/operator-guide.md, "Team code on Kubernetes"). As root (sandbox.rootWorker) with only what
its sandbox needs: SETUID and SETGID to drop a team's process to its job's uid, CHOWN and FOWNER
to lend the job its folders and take them back, DAC_OVERRIDE to reach into them (0700, the job's
uid's), KILL to end the job's processes. No SYS_ADMIN: no network namespace, and the cgroupfs
stays read-only, so the pod's own limits bound its jobs together. The root filesystem stays
writable: Ray and torch write under $HOME and /tmp, and an emptyDir in their place would be
0777 without the sticky bit (a sandbox uid could replace root's files there). */}}
{{- define "orch.workerSecurityContext" -}}
{{- if .Values.sandbox.rootWorker }}
runAsUser: 0
runAsGroup: 0
runAsNonRoot: false
capabilities:
  drop: [ALL]
  add: [SETUID, SETGID, CHOWN, FOWNER, DAC_OVERRIDE, KILL]
{{- else }}
runAsUser: 1000
runAsGroup: 100
runAsNonRoot: true
capabilities:
  drop: [ALL]
{{- end }}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: false
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The sandbox settings of the workers (values `sandbox.*`), each only when set. */}}
{{- define "orch.sandboxEnv" -}}
{{- with .Values.sandbox }}
{{- if .allowUnisolated }}
- name: ORCH_ALLOW_UNISOLATED
  value: "1"
{{- end }}
{{- if .uids }}
{{- if not (regexMatch "^[1-9][0-9]*-[1-9][0-9]*$" (toString .uids)) }}
{{- fail (printf "sandbox.uids must be first-last, e.g. 61000-64999, got %v" .uids) }}
{{- end }}
- name: ORCH_SANDBOX_UIDS
  value: {{ .uids | quote }}
{{- end }}
{{- if .pidsMax }}
- name: ORCH_SANDBOX_PIDS_MAX
  value: {{ .pidsMax | int | toString | quote }}
{{- end }}
{{- if .memory }}
- name: ORCH_SANDBOX_MEMORY
  value: {{ .memory | quote }}
{{- end }}
{{- end }}
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
