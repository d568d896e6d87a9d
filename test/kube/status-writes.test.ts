// The operator writes a resource's status once per change, counted at the HTTP level against the
// real API server. Regressions from a review at 600 resources: each status the API server handed
// back (keys sorted) compared unequal to the one built (keys in another order), so a restart or a
// failover sent 600 PATCHes that changed nothing; and on create, the finalizer's watch event
// replaced the cached copy with one without status, so every new object's status was written twice.
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { afterEach, describe, expect, it } from "vitest";
import type { Operator } from "../../operator/mod.ts";
import { destinationYaml, secretYaml, sourceYaml, yamlDocuments } from "../harness/documents.ts";
import { startOperator, useOperatorEnv } from "../harness/operator.ts";

const env = useOperatorEnv("status");

/** PATCH requests to a status subresource in the test's namespace, by object name, while on. */
function countStatusPatches() {
  const byName = new Map<string, number>();
  const onRequest = (message: unknown) => {
    const { method, path } = (message as { request: { method: string; path: string } }).request;
    const match = new RegExp(`/namespaces/${env.namespace}/[a-z]+/([^/?]+)/status`).exec(path);
    if (method === "PATCH" && match) byName.set(match[1]!, (byName.get(match[1]!) ?? 0) + 1);
  };
  subscribe("undici:request:create", onRequest);
  return { byName, stop: () => unsubscribe("undici:request:create", onRequest) };
}

describe("status writes", () => {
  let stop: (() => void) | undefined;
  let operator: Operator | undefined;
  afterEach(async () => {
    stop?.();
    await operator?.stop();
  });

  it("one status write per new object, and none when a new operator finds nothing changed", async () => {
    const names = ["a", "b", "c"];
    const created = countStatusPatches();
    stop = created.stop;
    operator = await startOperator(env);
    await env.apply(yamlDocuments(
      secretYaml("keys", Object.fromEntries(names.map((n) => [n, `status-key-${n}`]))),
      ...names.map((n) => sourceYaml(`src-${n}`, { name: "keys", key: n })),
      ...names.map((n) => destinationYaml(`dst-${n}`, { sources: [`src-${n}`], urls: [env.receiver.url(`/${n}`)] })),
    ));
    for (const n of names) {
      await env.waitReady("Source", `src-${n}`);
      await env.waitReady("WebhookDestination", `dst-${n}`);
    }
    // Let every watch event of those writes arrive and be reconciled.
    await new Promise((r) => setTimeout(r, 2000));
    const objects = [...names.map((n) => `src-${n}`), ...names.map((n) => `dst-${n}`)];
    expect.soft(Object.fromEntries(objects.map((o) => [o, created.byName.get(o) ?? 0]))).toEqual(Object.fromEntries(objects.map((o) => [o, 1])));
    created.stop();
    await operator.stop();

    // A new operator (a restart, a failover) reads every status back from the API server.
    const restarted = countStatusPatches();
    stop = restarted.stop;
    operator = await startOperator(env);
    await new Promise((r) => setTimeout(r, 2000));
    expect(Object.fromEntries(restarted.byName)).toEqual({});
  });
});
