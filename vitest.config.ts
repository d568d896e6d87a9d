import { configDefaults, defineConfig } from "vitest/config";

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
          exclude: [...configDefaults.exclude, "test/kube/**"],
        },
      },
      {
        extends: true,
        test: {
          name: "kube",
          include: ["test/kube/**/*.test.ts"],
          // One control plane for the whole run, started only when this project has files to run.
          globalSetup: ["test/harness/control-plane-setup.ts"],
        },
      },
    ],
  },
});
