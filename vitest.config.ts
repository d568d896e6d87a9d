import { configDefaults, defineConfig } from "vitest/config";

/**
 * Tests that measure throughput against each other. Beside other test files on two cores their
 * ratios swing with whatever else runs (the isolation test read 0.77 to 0.99 in one afternoon), so
 * they run alone, after everything else.
 */
const measuring = ["test/delivery/isolation.test.ts"];

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
          name: "measuring",
          include: measuring,
          maxWorkers: 1,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
