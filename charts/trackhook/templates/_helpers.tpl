{{/* Chart name, possibly overridden. */}}
{{- define "trackhook.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: <release>-<chart>, or the release name when it already contains the chart name. */}}
{{- define "trackhook.fullname" -}}
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

{{/* <fullname>-<component>, within 63 characters. */}}
{{- define "trackhook.componentName" -}}
{{- printf "%s-%s" (include "trackhook.fullname" .root | trunc (int (sub 62 (len .component))) | trimSuffix "-") .component }}
{{- end }}

{{- define "trackhook.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels (immutable): name, instance and, given one, component. */}}
{{- define "trackhook.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trackhook.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end }}

{{/* The recommended labels of every object; call with (dict "root" $ "component" "ingest"). */}}
{{- define "trackhook.labels" -}}
helm.sh/chart: {{ include "trackhook.chart" .root }}
{{ include "trackhook.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: trackhook
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "trackhook.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{- define "trackhook.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "trackhook.componentName" (dict "root" . "component" "operator")) .Values.operator.serviceAccount.name }}
{{- else }}
{{- /* Not "default": the operator's ClusterRole reads Secrets, and every pod without a ServiceAccount of its own runs as "default". */}}
{{- required "operator.serviceAccount.name: name the operator's existing ServiceAccount when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
A Deployment's replicas: the value's, or with an HPA the live count (at least minReplicas).
Left out, as charts often do for an HPA, the API server would set 1 whenever a release stops
rendering it: turning autoscaling on took a running Deployment down to 1 pod until the HPA acted.
Without a cluster (helm template, --dry-run=client) lookup finds nothing: minReplicas.
*/}}
{{- define "trackhook.replicas" -}}
{{- $values := .values }}
{{- if not $values.autoscaling.enabled }}
replicas: {{ $values.replicas }}
{{- else }}
{{- $live := lookup "apps/v1" "Deployment" .root.Release.Namespace (include "trackhook.componentName" (dict "root" .root "component" .component)) }}
replicas: {{ max (int $values.autoscaling.minReplicas) (int (dig "spec" "replicas" 0 $live)) }}
{{- end }}
{{- end }}

{{/* The ServiceAccount of ingest and delivery: no API access, no token mounted. */}}
{{- define "trackhook.dataplane.serviceAccountName" -}}
{{- include "trackhook.componentName" (dict "root" . "component" "dataplane") }}
{{- end }}

{{/* Environment shared by every component: the ConfigMap, and the NATS URL from a Secret if asked. */}}
{{- define "trackhook.env" -}}
envFrom:
  - configMapRef:
      name: {{ include "trackhook.fullname" . }}
{{- end }}

{{- define "trackhook.envVars" -}}
{{- if .root.Values.nats.existingSecret.name }}
- name: TRACKHOOK_NATS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.nats.existingSecret.name }}
      key: {{ .root.Values.nats.existingSecret.key }}
{{- end }}
{{- include "trackhook.natsAuthEnv" (dict "root" .root "component" .component) }}
{{- if eq .component "delivery" }}
{{- include "trackhook.egressProxyEnv" .root }}
{{- end }}
{{- with .values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* delivery.egressProxy as the environment of `deliver` (the URL from a Secret when it holds
credentials). `default dict`: --reuse-values from a release older than the value. */}}
{{- define "trackhook.egressProxyEnv" -}}
{{- $proxy := .Values.delivery.egressProxy | default dict }}
{{- $secret := dig "existingSecret" "name" "" $proxy }}
{{- if and $proxy.url $secret }}
{{- fail "set only one of delivery.egressProxy.url and delivery.egressProxy.existingSecret.name" }}
{{- end }}
{{- if and $proxy.noProxy (not (or $proxy.url $secret)) }}
{{- fail "delivery.egressProxy.noProxy lists hosts that bypass a proxy: set delivery.egressProxy.url (or existingSecret) too" }}
{{- end }}
{{- if $proxy.url }}
- name: TRACKHOOK_EGRESS_PROXY
  value: {{ $proxy.url | quote }}
{{- else if $secret }}
- name: TRACKHOOK_EGRESS_PROXY
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ dig "existingSecret" "key" "url" $proxy }}
{{- end }}
{{- with $proxy.noProxy }}
- name: TRACKHOOK_EGRESS_NO_PROXY
  value: {{ join "," . | quote }}
{{- end }}
{{- end }}

{{/* Where the NATS .creds file and TLS files are mounted (read-only, from the user's Secrets). */}}
{{- define "trackhook.natsCredsDir" -}}/etc/trackhook/nats/creds{{- end }}
{{- define "trackhook.natsTlsDir" -}}/etc/trackhook/nats/tls{{- end }}

{{/* The NATS user and .creds Secrets of one component: its own (nats.auth.perComponent or
nats.creds.perComponent) if it has one, else the shared ones. Call with
(dict "root" $ "component" "ingest"); prints them as YAML (auth, creds) for fromYaml. */}}
{{- define "trackhook.natsSecrets" -}}
{{- $nats := .root.Values.nats }}
{{- $auth := index ($nats.auth.perComponent | default dict) .component | default "" }}
{{- $creds := index ($nats.creds.perComponent | default dict) .component | default "" }}
{{- if and $auth $creds }}
{{- fail (printf "set only one of nats.auth.perComponent.%s and nats.creds.perComponent.%s" .component .component) }}
{{- end }}
{{- if not (or $auth $creds) }}
{{- if and $nats.auth.existingSecret $nats.creds.existingSecret }}
{{- fail "set only one NATS authentication method: nats.auth.existingSecret or nats.creds.existingSecret" }}
{{- end }}
{{- $auth = $nats.auth.existingSecret }}
{{- $creds = $nats.creds.existingSecret }}
{{- end }}
{{- dict "auth" $auth "creds" $creds | toYaml }}
{{- end }}

{{/* NATS authentication and TLS as dataplane/nats/auth.ts reads them: a user and password or a
token from the Secret as secretKeyRef variables, the .creds file and TLS files as paths of
mounted files. Never in the ConfigMap, never on the command line. */}}
{{- define "trackhook.natsAuthEnv" -}}
{{- $nats := .root.Values.nats }}
{{- $secrets := include "trackhook.natsSecrets" . | fromYaml }}
{{- with $secrets.auth }}
{{- if eq $nats.auth.type "token" }}
- name: TRACKHOOK_NATS_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $nats.auth.tokenKey }}
{{- else }}
- name: TRACKHOOK_NATS_USER
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $nats.auth.userKey }}
- name: TRACKHOOK_NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $nats.auth.passwordKey }}
{{- end }}
{{- end }}
{{- if $secrets.creds }}
- name: TRACKHOOK_NATS_CREDS
  value: {{ include "trackhook.natsCredsDir" . }}/nats.creds
{{- end }}
{{- if $nats.tls.existingSecret }}
{{- if $nats.tls.caKey }}
- name: TRACKHOOK_NATS_CA
  value: {{ include "trackhook.natsTlsDir" . }}/ca.crt
{{- end }}
{{- if $nats.tls.clientCert }}
- name: TRACKHOOK_NATS_CERT
  value: {{ include "trackhook.natsTlsDir" . }}/tls.crt
- name: TRACKHOOK_NATS_KEY
  value: {{ include "trackhook.natsTlsDir" . }}/tls.key
{{- end }}
{{- end }}
{{- end }}

{{/* The Secret volumes of the NATS .creds and TLS files: only the keys asked for, readable by
the pod's group (fsGroup) alone, or by everyone in the container without an fsGroup. */}}
{{- define "trackhook.natsVolumes" -}}
{{- $nats := .root.Values.nats }}
{{- $credsSecret := (include "trackhook.natsSecrets" . | fromYaml).creds }}
{{- $mode := ternary 288 292 (not (empty .root.Values.podSecurityContext.fsGroup)) }}
{{- with $credsSecret }}
- name: nats-creds
  secret:
    secretName: {{ . }}
    defaultMode: {{ $mode }} # {{ ternary "0440" "0444" (eq $mode 288) }}
    items:
      - key: {{ $nats.creds.key }}
        path: nats.creds
{{- end }}
{{- if $nats.tls.existingSecret }}
- name: nats-tls
  secret:
    secretName: {{ $nats.tls.existingSecret }}
    defaultMode: {{ $mode }} # {{ ternary "0440" "0444" (eq $mode 288) }}
    items:
      {{- if $nats.tls.caKey }}
      - key: {{ $nats.tls.caKey }}
        path: ca.crt
      {{- end }}
      {{- if $nats.tls.clientCert }}
      - key: {{ $nats.tls.certKey }}
        path: tls.crt
      - key: {{ $nats.tls.keyKey }}
        path: tls.key
      {{- end }}
{{- end }}
{{- end }}

{{- define "trackhook.natsVolumeMounts" -}}
{{- if (include "trackhook.natsSecrets" . | fromYaml).creds }}
- name: nats-creds
  mountPath: {{ include "trackhook.natsCredsDir" . }}
  readOnly: true
{{- end }}
{{- if .root.Values.nats.tls.existingSecret }}
- name: nats-tls
  mountPath: {{ include "trackhook.natsTlsDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/* Pod-level fields shared by every component; call with (dict "root" $ "values" .Values.ingest). */}}
{{- define "trackhook.podScheduling" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
terminationGracePeriodSeconds: {{ .values.terminationGracePeriodSeconds }}
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: 64Mi
  {{- with include "trackhook.natsVolumes" (dict "root" .root "component" .component) | trim }}
  {{- . | nindent 2 }}
  {{- end }}
  {{- with .values.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/* Probes on a component's ops endpoints. Every component serves /healthz at once and says
on /readyz what it waits for (NATS, the config bucket the operator creates), so a minute is
plenty for the startup probe: a long wait for NATS is not a reason to restart a pod. */}}
{{- define "trackhook.probes" -}}
startupProbe:
  httpGet:
    path: /healthz
    port: {{ .port }}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: {{ div .startupSeconds 5 }}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ .port }}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ .port }}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
{{- end }}

{{/* Container fields shared by every component. */}}
{{- define "trackhook.containerCommon" -}}
image: {{ include "trackhook.image" .root }}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
securityContext:
  {{- toYaml .root.Values.containerSecurityContext | nindent 2 }}
resources:
  {{- toYaml .values.resources | nindent 2 }}
volumeMounts:
  - name: tmp
    mountPath: /tmp
  {{- with include "trackhook.natsVolumeMounts" (dict "root" .root "component" .component) | trim }}
  {{- . | nindent 2 }}
  {{- end }}
  {{- with .values.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/* Pod annotations: the checksum of the shared ConfigMap rolls pods when it changes. */}}
{{- define "trackhook.podAnnotations" -}}
checksum/config: {{ include (print .root.Template.BasePath "/configmap.yaml") .root | sha256sum }}
{{- with .values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* operator.watchNamespace as a list: "" (all namespaces) is empty; one name or a list of them. */}}
{{- define "trackhook.operator.watchNamespaces" -}}
{{- $w := .Values.operator.watchNamespace }}
{{- if kindIs "string" $w }}{{ $w }}{{ else }}{{ join "," (uniq $w) }}{{ end }}
{{- end }}

{{/* The leader Lease: one per release, so that two releases in one namespace do not share it. */}}
{{- define "trackhook.operator.leaseName" -}}
{{- .Values.operator.leaderElection.leaseName | default (include "trackhook.componentName" (dict "root" . "component" "operator")) }}
{{- end }}
