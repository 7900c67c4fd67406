{{- define "dranode.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "dranode.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "dranode.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* repository:tag, or repository:tag@digest when image.digest pins it. */}}
{{- define "dranode.image" -}}
{{- $i := .Values.image -}}
{{- if $i.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" $i.digest) -}}
{{- fail (printf "image.digest %q: want sha256:<64 hex digits>" $i.digest) -}}
{{- end -}}
{{- printf "%s:%s@%s" $i.repository $i.tag $i.digest -}}
{{- else -}}
{{- printf "%s:%s" $i.repository $i.tag -}}
{{- end -}}
{{- end -}}

{{/* The container's securityContext: values.securityContext, plus the
vendor's opt-ins (extraCapabilities, privileged). */}}
{{- define "dranode.securityContext" -}}
{{- $sc := deepCopy .Values.securityContext -}}
{{- with .Values.extraCapabilities -}}
{{- $caps := default dict $sc.capabilities -}}
{{- $_ := set $caps "add" (concat (default list $caps.add) .) -}}
{{- $_ := set $sc "capabilities" $caps -}}
{{- end -}}
{{- if .Values.privileged -}}
{{- $_ := set $sc "privileged" true -}}
{{- $_ := set $sc "allowPrivilegeEscalation" true -}}
{{- end -}}
{{- toYaml $sc -}}
{{- end -}}
