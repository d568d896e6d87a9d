// Source → `source.<ns>.<name>` in the config bucket, with the write key as a digest. A Source
// whose key cannot be read is taken out of the bucket: its old key must stop working.
import { compileSource, secretNamesOf, sourceKey } from "../../dataplane/config/mod.ts";
import type { SourceDocument } from "../../schema/mod.ts";
import type { ReconcileResult } from "../queue.ts";
import { addFinalizer, isDeleting, readSecrets, removeFinalizer, setReady, type OperatorContext } from "./context.ts";

export async function reconcileSource(ctx: OperatorContext, namespace: string, name: string): Promise<ReconcileResult> {
  const source = ctx.sources.get(namespace, name);
  const digests = ctx.sourceDigests;
  const key = sourceKey(namespace, name);
  if (!source || isDeleting(source)) {
    digests.delete(`${namespace}/${name}`);
    if (await ctx.config.delete(key)) ctx.log.info({ source: `${namespace}/${name}` }, "source removed from the config");
    if (source) await removeFinalizer(ctx, source);
    return;
  }
  await addFinalizer(ctx, source);

  const doc = source as unknown as SourceDocument;
  const result = compileSource(namespace, doc, await readSecrets(ctx, namespace, secretNamesOf(doc)));
  if (!result.ok) {
    digests.delete(`${namespace}/${name}`);
    await ctx.config.delete(key);
    const [first] = result.problems;
    await setReady(ctx, source, { status: "False", reason: first!.reason, message: `${first!.field}: ${first!.message}; the source accepts no messages` });
    return;
  }
  const clash = [...digests].find(([id, digest]) => id !== `${namespace}/${name}` && digest === result.value.writeKeySha256);
  if (clash) {
    await ctx.config.delete(key);
    await setReady(ctx, source, { status: "False", reason: "DuplicateWriteKey", message: `Source ${clash[0]} already uses the same write key; give each Source its own` });
    return;
  }
  digests.set(`${namespace}/${name}`, result.value.writeKeySha256);
  const changed = await ctx.config.put(key, result.value);
  if (changed) ctx.log.info({ source: `${namespace}/${name}`, enabled: result.value.enabled }, "source config written");
  await setReady(ctx, source, {
    status: "True",
    reason: "Reconciled",
    message: result.value.enabled ? "the write key is accepted by ingest" : "disabled: the write key is refused as unknown",
  });
}
