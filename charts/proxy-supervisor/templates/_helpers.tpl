{{/* The sidecar's image: registry/repository@digest, else :tag, else :appVersion. */}}
{{- define "proxy-supervisor.image" -}}
{{- $i := .Values.image -}}
{{- if $i.digest -}}
{{ $i.registry }}/{{ $i.repository }}@{{ $i.digest }}
{{- else -}}
{{ $i.registry }}/{{ $i.repository }}:{{ $i.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The MutatingAdmissionPolicy's API: v1 from Kubernetes 1.36, v1beta1 on 1.34 and 1.35. */}}
{{- define "proxy-supervisor.mutatingAPI" -}}
{{- if .Values.admissionAPIVersion -}}
{{ .Values.admissionAPIVersion }}
{{- else if semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version -}}
admissionregistration.k8s.io/v1
{{- else -}}
admissionregistration.k8s.io/v1beta1
{{- end -}}
{{- end -}}

{{/* The binding's namespaceSelector, when the values narrow it. */}}
{{- define "proxy-supervisor.matchResources" -}}
{{- with .Values.namespaceSelector }}
  matchResources:
    namespaceSelector:
      {{- toYaml . | nindent 6 }}
{{- end }}
{{- end -}}
