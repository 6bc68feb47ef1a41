{{- define "kinds.name" -}}{{ .Release.Name }}-app{{- end -}}
{{- define "kinds.labels" -}}
app.kubernetes.io/name: kinds
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
