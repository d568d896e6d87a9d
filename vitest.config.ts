import { defineConfig } from "vitest/config";

// Integration tests start real nats-server processes; two cores, so keep parallelism modest.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
    maxWorkers: 2,
  },
});
