import { resolve } from "node:path";
import { configDefaults, defineConfig } from "vitest/config";

/**
 * Tests that measure throughput against each other. Beside other test files on two cores their
 * ratios swing with whatever else runs (the isolation test read 0.77 to 0.99 in one afternoon), so
 * they run alone, after everything else.
 */
const measuring = ["test/delivery/isolation.test.ts"];

/**
 * Run a second time on the newest nats-server release line (NATS_SERVER_NEXT_VERSION in
 * scripts/versions.sh, built by `npm run tools`) with the feature flags NATS means to make
 * defaults: js_ack_fc_v2 puts acks and flow control on `$JS.ACK.<domain>.<account hash>.<stream>...`
 * subjects, which permissions and the delivery info read from an ack subject must follow. The
 * files that ack, nak, read delivery info, watch the config bucket, store and run a cluster.
 */
const natsNext = [
  "test/nats/cluster.test.ts",
  "test/nats/permissions.test.ts",
  "test/nats/streams.test.ts",
  "test/delivery/delivery.test.ts",
  "test/delivery/retry-window.test.ts",
  "test/config/kv.test.ts",
  "test/ingest/endpoints.test.ts",
];

// Integration tests start real nats-server processes (and, for "kube", etcd + kube-apiserver);
// two cores, so keep parallelism modest.
export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
    maxWorkers: 2,
    projects: [
      {
        extends: true,
        test: {
          name: "dataplane",
          include: ["test/**/*.test.ts"],
          exclude: [...configDefaults.exclude, "test/kube/**", ...measuring],
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: "kube",
          include: ["test/kube/**/*.test.ts"],
          // One control plane for the whole run, started only when this project has files to run.
          globalSetup: ["test/harness/control-plane-setup.ts"],
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: "nats-next",
          include: natsNext,
          env: { TRACKHOOK_TEST_NATS_SERVER: resolve(".tools/bin/nats-server-next"), TRACKHOOK_TEST_NATS_FEATURE_FLAGS: "js_ack_fc_v2" },
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: "measuring",
          include: measuring,
          maxWorkers: 1,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
