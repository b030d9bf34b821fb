{{/* The release's base name, at most 63 characters with any suffix it gets. */}}
{{- define "limen.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "limen.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "limen.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "limen.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* A cluster-scoped name: unique per release and namespace. */}}
{{- define "limen.clusterName" -}}
{{- printf "%s-%s-%s" .root.Release.Namespace (include "limen.fullname" .root) .suffix | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The proxy's config file (keys are limen proxy's flag names). */}}
{{- define "limen.proxyConfig" -}}
{{- $p := .Values.proxy -}}
{{- $cfg := dict "listen" (printf "0.0.0.0:%d" (int $p.port)) "data-dir" "/var/lib/limen" "shutdown-timeout" (printf "%ds" (int $p.shutdownTimeoutSeconds)) -}}
{{- with $p.clusters }}{{ $_ := set $cfg "clusters" . }}{{ end -}}
{{- if ($p.keys | default dict).existingSecret }}{{ $_ := set $cfg "ca-dir" "/etc/limen/ca" }}{{ end -}}
{{- with $p.clusterLabels }}{{ $_ := set $cfg "cluster-label" . }}{{ end -}}
{{- /* The Service's names, so that in-cluster workers verify the certificate. */ -}}
{{- $svc := printf "%s-proxy" (include "limen.fullname" .) -}}
{{- $names := list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) -}}
{{- $_ := set $cfg "server-name" (concat $names $p.serverNames | uniq) -}}
{{- $_ := set $cfg "recording-store-max-bytes" $p.recordings.maxBytes -}}
{{- with $p.recordings.store }}{{ $_ := set $cfg "recording-store" . }}{{ end -}}
{{- with $p.recordings.retention }}{{ $_ := set $cfg "recording-retention" . }}{{ end -}}
{{- $a := $p.audit | default dict -}}
{{- with $a.retention }}{{ $_ := set $cfg "audit-retention" . }}{{ end -}}
{{- with $a.exportFile }}{{ $_ := set $cfg "audit-export-file" . }}{{ end -}}
{{- if and $a.webhook $a.webhook.enabled }}{{ $_ := set $cfg "audit-webhook-config" (printf "/etc/limen/audit-webhook/%s" $a.webhook.key) }}{{ end -}}
{{- toYaml (mergeOverwrite $cfg (deepCopy $p.config)) -}}
{{- end -}}

{{/* The worker's config file (keys are limen worker's flag names); no
     --kube-api-server, --kube-ca-file or --kube-token-file: the in-cluster
     defaults apply. */}}
{{- define "limen.workerConfig" -}}
{{- $w := .Values.worker -}}
{{- $cfg := dict "proxy" $w.proxyAddress "kube-cluster" $w.cluster "data-dir" "/var/lib/limen" "kube-impersonation" (include "limen.impersonation" .) "shutdown-timeout" (printf "%ds" (int $w.shutdownTimeoutSeconds)) -}}
{{- /* A rolling update starts the new pod first: the old one serves until
     it has connected. Recreate (persistence on) has no new pod to wait for. */ -}}
{{- $_ := set $cfg "shutdown-handover" (ternary "0s" "5s" (and $w.persistence.enabled true)) -}}
{{- $labels := list -}}
{{- range $k, $v := $w.clusterLabels }}{{ $labels = append $labels (printf "%s=%s" $k $v) }}{{ end -}}
{{- with $labels }}{{ $_ := set $cfg "kube-cluster-label" . }}{{ end -}}
{{- with $w.userPrefix }}{{ $_ := set $cfg "kube-user-prefix" . }}{{ end -}}
{{- toYaml (mergeOverwrite $cfg (deepCopy $w.config)) -}}
{{- end -}}

{{/* The worker's impersonation mode: worker.rbac.impersonation, with auto
     meaning constrained on Kubernetes 1.36+ (where constrained impersonation
     is on by default) and legacy before. The RBAC template and the worker's
     --kube-impersonation both read it, so they never disagree. */}}
{{- define "limen.impersonation" -}}
{{- $m := .Values.worker.rbac.impersonation -}}
{{- if eq $m "auto" -}}
{{- ternary "constrained" "legacy" (semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version) -}}
{{- else -}}
{{- $m -}}
{{- end -}}
{{- end -}}
