#!/usr/bin/env bash
# trackhook end to end on a kind cluster, for machines with Docker (CI here has none; the other
# suites cover everything but real pods). From the repository root:
#
#   bash test/e2e/kind/run.sh
#
# 1. creates a kind cluster (test/e2e/kind/kind-config.yaml, node image pinned below),
# 2. builds the image from the Dockerfile, tagged per commit (trackhook:e2e-<sha>), and loads it,
# 3. installs NATS with JetStream (the nats-io/k8s chart) and charts/trackhook, both with --wait,
# 4. deploys an in-cluster webhook receiver, the Secrets, a Source and a WebhookDestination,
# 5. sends events with @segment/analytics-node through a port-forward to the ingest Service and
#    checks the receiver got every one, signed (test/e2e/kind/send-and-verify.ts),
# 6. on failure collects logs into $ARTIFACTS (kind export logs, pods, events, helm status),
# 7. deletes the cluster (TRACKHOOK_E2E_KEEP=1 keeps it for a look).
#
# Skips (exit 0) with a message where `docker info` fails. Needs kind (built into .tools/bin with
# `go install` when Go is there), kubectl, helm and Node (npm run tools puts them in .tools/bin).
set -euo pipefail

script_dir=${BASH_SOURCE[0]%/*}
[ "$script_dir" = "${BASH_SOURCE[0]}" ] && script_dir=.
cd "$script_dir/../../.."
ROOT=$PWD
HERE=test/e2e/kind
export PATH="$ROOT/.tools/bin:$ROOT/node_modules/.bin:$PATH"

CLUSTER=${TRACKHOOK_E2E_CLUSTER:-trackhook-e2e}
KIND_VERSION=${KIND_VERSION:-v0.33.0}
# kind v0.33.0's image for Kubernetes 1.35 (the minor the kube tests pin).
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:v1.35.8@sha256:07b2536e30b803ed61d1677a79df6115f798ce64c80f9e22f6ed45afd09323c0}
NATS_CHART_VERSION=${NATS_CHART_VERSION:-1.3.2}
ARTIFACTS=${ARTIFACTS:-$ROOT/.tools/e2e-artifacts}
KEEP=${TRACKHOOK_E2E_KEEP:-0}
RELEASE_NS=trackhook
APP_NS=trackhook-e2e
INGEST_PORT=${INGEST_PORT:-18080}
RECEIVER_PORT=${RECEIVER_PORT:-18081}

log() { printf 'e2e kind: %s\n' "$*"; }
skip() {
  log "SKIPPED: $*"
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
}
die() {
  log "FAILED: $*" >&2
  exit 1
}

if ! command -v docker >/dev/null 2>&1; then
  skip "docker is not installed (this suite needs a Docker engine for kind)"
fi
if ! docker info >/dev/null 2>&1; then
  skip "\`docker info\` failed: no Docker engine is reachable (this suite needs one for kind)"
fi

if ! command -v kind >/dev/null 2>&1; then
  command -v go >/dev/null 2>&1 || die "kind is not on PATH and Go is not there to build it (go install sigs.k8s.io/kind@$KIND_VERSION)"
  log "building kind $KIND_VERSION into .tools/bin"
  mkdir -p "$ROOT/.tools/bin"
  GOBIN="$ROOT/.tools/bin" go install "sigs.k8s.io/kind@$KIND_VERSION"
fi
for tool in kubectl helm node; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not on PATH: run npm run tools"
done
[ -d node_modules/@segment/analytics-node ] || die "node_modules is missing: run npm ci"

SHA=$(git rev-parse --short HEAD 2>/dev/null || echo nogit)
if [ -n "$(git status --porcelain 2>/dev/null -- Dockerfile cli dataplane operator schema package.json package-lock.json)" ]; then
  SHA="$SHA-dirty"
fi
IMAGE_REPO=trackhook
IMAGE_TAG="e2e-$SHA"
IMAGE="$IMAGE_REPO:$IMAGE_TAG"
export KUBECONFIG="$ROOT/.tools/e2e-kubeconfig"

PIDS=()
status=1
cleanup() {
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do kill "$pid" 2>/dev/null || true; done
  if [ "$status" -ne 0 ] && kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    log "collecting logs into $ARTIFACTS"
    mkdir -p "$ARTIFACTS"
    kind export logs "$ARTIFACTS/kind" --name "$CLUSTER" >/dev/null 2>&1 || true
    kubectl get all,sources,webhookdestinations,leases -A -o wide >"$ARTIFACTS/objects.txt" 2>&1 || true
    kubectl get events -A --sort-by=.lastTimestamp >"$ARTIFACTS/events.txt" 2>&1 || true
    kubectl -n "$APP_NS" describe sources,webhookdestinations >"$ARTIFACTS/resources.txt" 2>&1 || true
    for ns in "$RELEASE_NS" "$APP_NS" nats; do
      kubectl -n "$ns" logs --all-containers --prefix --tail=-1 -l app.kubernetes.io/instance >"$ARTIFACTS/logs-$ns.txt" 2>&1 || true
    done
    kubectl -n "$APP_NS" logs deploy/receiver >"$ARTIFACTS/logs-receiver.txt" 2>&1 || true
    helm -n "$RELEASE_NS" status trackhook >"$ARTIFACTS/helm-status.txt" 2>&1 || true
  fi
  if [ "$KEEP" = 1 ]; then
    log "keeping cluster $CLUSTER (KUBECONFIG=$KUBECONFIG); delete it with: kind delete cluster --name $CLUSTER"
  else
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  if [ "$status" -eq 0 ]; then
    echo "1 passed, 0 failed"
  else
    echo "0 passed, 1 failed"
  fi
}
trap cleanup EXIT

# Waits until a local port answers HTTP (a port-forward is up).
wait_http() {
  local url=$1
  for _ in $(seq 1 60); do
    if node -e 'fetch(process.argv[1]).then(() => process.exit(0), () => process.exit(1))' "$url" 2>/dev/null; then return 0; fi
    sleep 1
  done
  die "$url never answered"
}

log "creating cluster $CLUSTER ($KIND_NODE_IMAGE)"
kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
kind create cluster --name "$CLUSTER" --image "$KIND_NODE_IMAGE" --config "$HERE/kind-config.yaml" --kubeconfig "$KUBECONFIG" --wait 180s

log "building $IMAGE"
docker build --build-arg "VERSION=$IMAGE_TAG" --build-arg "REVISION=$SHA" -t "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER"

log "installing NATS (nats chart $NATS_CHART_VERSION, JetStream on file storage)"
helm upgrade --install nats nats --repo https://nats-io.github.io/k8s/helm/charts/ --version "$NATS_CHART_VERSION" \
  --namespace nats --create-namespace --values "$HERE/nats-values.yaml" --wait --timeout 5m

log "installing charts/trackhook"
helm upgrade --install trackhook charts/trackhook --namespace "$RELEASE_NS" --create-namespace \
  --values "$HERE/values-e2e.yaml" --set "image.repository=$IMAGE_REPO" --set "image.tag=$IMAGE_TAG" \
  --wait --timeout 5m
kubectl -n "$RELEASE_NS" get pods -o wide

log "deploying the receiver, the Secrets, a Source and a WebhookDestination in $APP_NS"
WRITE_KEY=$(node -e 'console.log(require("crypto").randomBytes(16).toString("hex"))')
SHARED_SECRET=$(node -e 'console.log(require("crypto").randomBytes(24).toString("base64url"))')
kubectl create namespace "$APP_NS"
sed "s#TRACKHOOK_IMAGE#$IMAGE#" "$HERE/receiver.yaml" | kubectl -n "$APP_NS" apply -f -
kubectl -n "$APP_NS" create secret generic website-write-key --from-literal=writeKey="$WRITE_KEY"
kubectl -n "$APP_NS" create secret generic receiver-webhook --from-literal=sharedSecret="$SHARED_SECRET"
kubectl -n "$APP_NS" apply -f "$HERE/resources.yaml"
kubectl -n "$APP_NS" rollout status deploy/receiver --timeout=120s
kubectl -n "$APP_NS" wait --for=condition=Ready source/website webhookdestination/receiver --timeout=120s
kubectl -n "$APP_NS" get trackhook

log "port-forwarding the ingest Service and the receiver"
kubectl -n "$RELEASE_NS" port-forward svc/trackhook-ingest "$INGEST_PORT:80" >"$ROOT/.tools/e2e-port-forward-ingest.log" 2>&1 &
PIDS+=("$!")
kubectl -n "$APP_NS" port-forward svc/receiver "$RECEIVER_PORT:8080" >"$ROOT/.tools/e2e-port-forward-receiver.log" 2>&1 &
PIDS+=("$!")
wait_http "http://127.0.0.1:$INGEST_PORT/healthz"
wait_http "http://127.0.0.1:$RECEIVER_PORT/healthz"

log "sending events with @segment/analytics-node"
INGEST_URL="http://127.0.0.1:$INGEST_PORT" RECEIVER_URL="http://127.0.0.1:$RECEIVER_PORT" \
  WRITE_KEY="$WRITE_KEY" SHARED_SECRET="$SHARED_SECRET" \
  node "$HERE/send-and-verify.ts"

status=0
log "passed"
