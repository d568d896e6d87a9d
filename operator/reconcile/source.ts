// Source → `source.<ns>.<name>` in the config bucket, with the write keys as digests. A Source
// whose main key cannot be read is disabled in the bucket: its old keys must stop working, and
// stay its own until the Source is deleted.
import { compileSource, secretNamesOf, sourceKey, writeKeyDigests } from "../../dataplane/config/mod.ts";
import type { SourceDocument } from "../../schema/mod.ts";
import { readyOf } from "../conditions.ts";
import type { ReconcileResult } from "../queue.ts";
import { addFinalizer, isDeleting, readSecrets, removeFinalizer, reportingFailures, setReady, type OperatorContext, type SourceKeys } from "./context.ts";

export async function reconcileSource(ctx: OperatorContext, namespace: string, name: string): Promise<ReconcileResult> {
  return reportingFailures(ctx, () => ctx.statusWrites.fresh(ctx.sources.get(namespace, name)), () => applySource(ctx, namespace, name));
}

async function applySource(ctx: OperatorContext, namespace: string, name: string): Promise<ReconcileResult> {
  const source = ctx.statusWrites.fresh(ctx.sources.get(namespace, name));
  const digests = ctx.sourceDigests;
  const key = sourceKey(namespace, name);
  if (!source || isDeleting(source)) {
    if (digests.delete(`${namespace}/${name}`)) requeueRefused(ctx, `${namespace}/${name}`);
    if (await ctx.config.delete(key)) ctx.log.info({ source: `${namespace}/${name}` }, "source removed from the config");
    if (source) await removeFinalizer(ctx, source);
    return;
  }
  await addFinalizer(ctx, source);

  const doc = source as unknown as SourceDocument;
  const result = compileSource(namespace, doc, await readSecrets(ctx, namespace, secretNamesOf(doc)));
  if (!result.ok) {
    // Its key stops working, but stays reserved for it until the Source is deleted: a Secret
    // recreated or edited by mistake must not hand the key, and its traffic, to a copy waiting
    // with DuplicateWriteKey (the key of a browser source is public). Written disabled, which
    // ingest treats as unknown, so that the reservation also survives an operator restart.
    const held = digests.get(`${namespace}/${name}`);
    if (held) await ctx.config.put(key, { namespace, name, enabled: false, ...held });
    else await ctx.config.delete(key);
    const [first] = result.problems;
    const reserved = held ? "; its write key stays reserved for it" : "";
    if (doc.spec.enabled === false) {
      // Off by choice, it needs no key: a Source switched off and its Secret deleted is no fault,
      // and was one (Ready=False, its alert firing for as long as it stayed off).
      await setReady(ctx, source, { status: "True", reason: "Reconciled", message: `disabled: the source accepts no messages${reserved} (while disabled its key is not needed; ${first!.field}: ${first!.message})` });
      return;
    }
    await setReady(ctx, source, { status: "False", reason: first!.reason, message: `${first!.field}: ${first!.message}; the source accepts no messages${reserved}` });
    return;
  }
  // Two Sources with one key: the one in effect keeps it, whatever their ages, so that neither
  // a new Source nor an old one whose Secret is edited can take another tenant's key (and its
  // traffic); who holds which key is read back from the bucket before the first reconcile. A
  // holder whose Source is gone (its removal not reconciled yet) holds nothing.
  const id = `${namespace}/${name}`;
  const mine = new Set(writeKeyDigests(result.value));
  const clash = [...digests].find(([other, keys]) => other !== id && writeKeyDigests(keys).some((d) => mine.has(d)));
  if (clash) {
    const [otherNs, otherName] = clash[0].split("/") as [string, string];
    if (ctx.sources.get(otherNs, otherName)) {
      digests.delete(id);
      await ctx.config.delete(key);
      // Another namespace's Source is not named: the key may have been copied from a public page.
      const holder = otherNs === namespace ? `Source ${clash[0]}` : "a Source in another namespace";
      await setReady(ctx, source, { status: "False", reason: "DuplicateWriteKey", message: `${holder} already uses the same write key; give each Source its own` });
      return;
    }
    digests.delete(clash[0]);
    await ctx.config.delete(sourceKey(otherNs, otherName));
  }
  const previous = digests.get(id);
  const keys: SourceKeys = { writeKeySha256: result.value.writeKeySha256, ...(result.value.additionalWriteKeys ? { additionalWriteKeys: result.value.additionalWriteKeys } : {}) };
  digests.set(id, keys);
  if (!previous || writeKeyDigests(previous).join() !== writeKeyDigests(keys).join()) requeueRefused(ctx, id);
  const changed = await ctx.config.put(key, result.value);
  if (changed) ctx.log.info({ source: `${namespace}/${name}`, enabled: result.value.enabled }, "source config written");
  const count = writeKeyDigests(keys).length;
  const accepted = count === 1 ? "the write key is accepted by ingest" : `its ${count} write keys are accepted by ingest`;
  // An additional key that cannot be read is left out rather than stopping the source: said here,
  // and in an Event when Ready's reason changes.
  const skipped = (result.skipped ?? []).map((p) => `; ${p.field} is not accepted: ${p.message}`).join("");
  await setReady(ctx, source, {
    status: "True",
    reason: skipped ? "AdditionalWriteKeySkipped" : "Reconciled",
    message: (result.value.enabled ? accepted : "disabled: the write keys are refused as unknown") + skipped,
  }, {}, skipped !== "");
}

/** A key given up or taken may change who may use it: refused Sources look again. */
function requeueRefused(ctx: OperatorContext, except: string): void {
  for (const s of ctx.sources.list()) {
    const id = `${s.metadata.namespace}/${s.metadata.name}`;
    if (id !== except && readyOf(s.status?.conditions)?.reason === "DuplicateWriteKey") {
      ctx.requeue("Source", s.metadata.namespace, s.metadata.name);
    }
  }
}
