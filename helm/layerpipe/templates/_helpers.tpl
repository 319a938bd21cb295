{{/*
Names are cut to 40 characters so that "<fullname>-coordinator" stays a valid name and the StatefulSet's
controller-revision-hash label (its name plus 11 characters) stays within 63.
*/}}
{{- define "layerpipe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" }}
{{- end }}

{{- define "layerpipe.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "layerpipe.coordinatorName" -}}
{{- printf "%s-coordinator" (include "layerpipe.fullname" .) }}
{{- end }}

{{/* The StatefulSet and its headless Service share this name: pods are <name>-<i>.<name>. */}}
{{- define "layerpipe.workerName" -}}
{{- printf "%s-worker" (include "layerpipe.fullname" .) }}
{{- end }}

{{- define "layerpipe.configName" -}}
{{- printf "%s-config" (include "layerpipe.fullname" .) }}
{{- end }}

{{- define "layerpipe.secretEnabled" -}}
{{- if or .Values.secret.create .Values.secret.existingSecret }}true{{- end }}
{{- end }}

{{- define "layerpipe.secretName" -}}
{{- if .Values.secret.existingSecret }}
{{- .Values.secret.existingSecret }}
{{- else }}
{{- printf "%s-secret" (include "layerpipe.fullname" .) }}
{{- end }}
{{- end }}

{{- define "layerpipe.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "layerpipe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: layerpipe
{{- end }}

{{/* Call with (dict "ctx" $ "component" "coordinator"|"worker"). */}}
{{- define "layerpipe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "layerpipe.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Call with (dict "image" <image values> "ctx" $). */}}
{{- define "layerpipe.image" -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .ctx.Chart.AppVersion) }}
{{- end }}

{{/*
The coordinator's --workers list in stage order: the StatefulSet's stable DNS names, so pod <i> is stage <i>
whichever node it runs on and however often it is replaced.
*/}}
{{- define "layerpipe.workerAddresses" -}}
{{- $name := include "layerpipe.workerName" . }}
{{- $addresses := list }}
{{- range $i := until (int .Values.workers.replicas) }}
{{- $addresses = append $addresses (printf "%s-%d.%s.%s.svc.%s:%d" $name $i $name $.Release.Namespace $.Values.clusterDomain (int $.Values.workers.port)) }}
{{- end }}
{{- join "," $addresses }}
{{- end }}

{{- define "layerpipe.modelVolume" -}}
- name: model
{{- if eq .Values.model.source "pvc" }}
  persistentVolumeClaim:
    claimName: {{ required "model.pvc.claimName is required when model.source is pvc" .Values.model.pvc.claimName }}
    readOnly: true
{{- else if eq .Values.model.source "hostPath" }}
  hostPath:
    path: {{ required "model.hostPath.path is required when model.source is hostPath" .Values.model.hostPath.path }}
    type: Directory
{{- else }}
{{- fail (printf "model.source must be pvc or hostPath, not %q" .Values.model.source) }}
{{- end }}
- name: config
  configMap:
    name: {{ include "layerpipe.configName" . }}
    defaultMode: 0444
{{- if include "layerpipe.secretEnabled" . }}
- name: secret
  secret:
    secretName: {{ include "layerpipe.secretName" . }}
    # One unprivileged user per container: readable by it without an fsGroup on the model volume.
    defaultMode: 0444
{{- end }}
{{- end }}

{{- define "layerpipe.volumeMounts" -}}
- name: model
  mountPath: {{ .Values.model.mountPath }}
  readOnly: true
  {{- with .Values.model.subPath }}
  subPath: {{ . }}
  {{- end }}
- name: config
  mountPath: /etc/layerpipe/config
  readOnly: true
{{- if include "layerpipe.secretEnabled" . }}
- name: secret
  mountPath: {{ .Values.secret.mountPath }}
  readOnly: true
{{- end }}
{{- end }}

{{/*
Call with (dict "ctx" $ "image" <image string> "coordinator" true|false): the coordinator needs the JSON
files (and the tokenizer when required), a worker the weights.
*/}}
{{- define "layerpipe.checkModelInit" -}}
- name: check-model
  image: {{ .image }}
  imagePullPolicy: {{ .ctx.Values.image.pullPolicy }}
  command: ["/bin/sh", "/etc/layerpipe/config/check-model.sh"]
  args:
    {{- if .coordinator }}
    - --no-weights
    {{- if .ctx.Values.model.validate.requireTokenizer }}
    - --tokenizer
    {{- end }}
    {{- end }}
    - {{ .ctx.Values.model.mountPath | quote }}
  volumeMounts:
    {{- include "layerpipe.volumeMounts" .ctx | nindent 4 }}
  securityContext:
    {{- toYaml .ctx.Values.securityContext | nindent 4 }}
{{- end }}

{{/* Workers report to a port of its own (--peer-listen) whenever TLS or tokens guard the client port. */}}
{{- define "layerpipe.peerPortEnabled" -}}
{{- if or .Values.tls.enabled .Values.auth.enabled }}true{{- end }}
{{- end }}

{{/* The Secret's file `key` at its mount path. Call with (dict "ctx" $ "key" <key>). */}}
{{- define "layerpipe.secretFile" -}}
{{- printf "%s/%s" .ctx.Values.secret.mountPath .key }}
{{- end }}

{{/* tls.enabled and auth.enabled read their files from the Secret: refuse them without one. */}}
{{- define "layerpipe.checkSecurityValues" -}}
{{- if and (or .Values.tls.enabled .Values.auth.enabled) (not (include "layerpipe.secretEnabled" .)) }}
{{- fail "tls.enabled and auth.enabled need the Secret: set secret.existingSecret or secret.create" }}
{{- end }}
{{- end }}

{{/*
The handler of the three probes. Kubernetes' native gRPC probe cannot do TLS, so with tls.enabled a probe
only checks that the port accepts connections (the coordinator's readiness then no longer waits for its
workers). Call with (dict "ctx" $ "port" <port>).
*/}}
{{- define "layerpipe.probeHandler" -}}
{{- if .ctx.Values.tls.enabled -}}
tcpSocket:
  port: {{ .port }}
{{- else -}}
grpc:
  port: {{ .port }}
{{- end }}
{{- end }}

{{- define "layerpipe.metricsAnnotations" -}}
{{- if .Values.metrics.enabled -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.metrics.port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end }}

{{- define "layerpipe.metricsContainerPort" -}}
{{- if .Values.metrics.enabled -}}
- name: metrics
  containerPort: {{ .Values.metrics.port }}
  protocol: TCP
{{- end }}
{{- end }}

{{- define "layerpipe.metricsServicePort" -}}
{{- if .Values.metrics.enabled -}}
- name: metrics
  port: {{ .Values.metrics.port }}
  targetPort: metrics
  protocol: TCP
{{- end }}
{{- end }}
