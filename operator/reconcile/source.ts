// Source → `source.<ns>.<name>` in the config bucket, with the write keys as digests. A Source
// whose main key cannot be read is disabled in the bucket: its old keys must stop working, and
// stay its own until the Source is deleted.
import { compileSource, secretNamesOf, sourceKey, writeKeyDigests } from "../../dataplane/config/mod.ts";
import { isDeepStrictEqual } from "node:util";
import type { CompiledSource, SourceDocument } from "../../schema/mod.ts";
import { readyOf } from "../conditions.ts";
import type { ReconcileResult } from "../queue.ts";
import { addFinalizer, isDeleting, readSecrets, removeFinalizer, reportingFailures, setReady, unsetField, type OperatorContext, type SourceKeys } from "./context.ts";

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
  const secrets = await readSecrets(ctx, namespace, secretNamesOf(doc));
  const result = compileSource(namespace, doc, secrets);
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
  const previous = digests.get(id);
  const owners = new Map<string, string>(); // digest -> the other Source holding it
  for (const [other, keys] of digests) if (other !== id) for (const digest of writeKeyDigests(keys)) owners.set(digest, other);
  // A holder in a namespace this operator does not watch is taken to be live: another operator's.
  const live = (other: string) => {
    const [ns, sourceName] = other.split("/") as [string, string];
    return !ctx.inScope(ns) || Boolean(ctx.sources.get(ns, sourceName));
  };
  const holderName = (other: string) => (other.startsWith(`${namespace}/`) ? `Source ${other}` : "a Source in another namespace");
  const mainHolder = owners.get(result.value.writeKeySha256);
  const ref = doc.spec.writeKeySecretRef;
  const keyFrom = { secretName: ref.name, secretKey: ref.key, secretResourceVersion: secrets.versionOf(ref.name) ?? "" };
  const heldElsewhere = source.status?.writeKeyHeldElsewhere;
  const holding = previous !== undefined && writeKeyDigests(previous).includes(result.value.writeKeySha256);
  // A key another namespace held when this Source was refused is not taken over once free: that
  // namespace deleting its Source (a rename in Git, a namespace re-created, `kubectl replace
  // --force`) would hand its apps' traffic to a copy that was waiting (found by a multi-tenant
  // review). Its own namespace's Sources take it, as a rename needs; this one only once its
  // Secret changes or it is made anew.
  const refusedBefore = !holding && isDeepStrictEqual(heldElsewhere, keyFrom);
  if ((mainHolder && live(mainHolder)) || refusedBefore) {
    digests.delete(id);
    await ctx.config.delete(key);
    const holder = mainHolder && live(mainHolder) ? mainHolder : undefined;
    const elsewhere = holder === undefined || !holder.startsWith(`${namespace}/`);
    // Another namespace's Source is not named in status (the key may have been copied from a
    // public page), but in the operator's log, for whoever runs the cluster to sort it out.
    if (holder && elsewhere && !refusedBefore) ctx.log.warn({ source: id, holder }, "write key refused: a Source in another namespace holds it");
    const message = holder
      ? `${holderName(holder)} already uses the same write key; give each Source its own${elsewhere ? " (this Source will not take the key over when that one is gone)" : ""}`
      : "a Source in another namespace used the same write key when this Source was refused; it is not taken over now that it is free, since that namespace's apps may still send with it. To claim it, change this Source's Secret or re-create the Source";
    await setReady(ctx, source, { status: "False", reason: "DuplicateWriteKey", message }, elsewhere ? { writeKeyHeldElsewhere: keyFrom } : unsetField(source.status, "writeKeyHeldElsewhere"));
    return;
  }
  // An additional key another Source holds is left out, like one that cannot be read: the source
  // keeps its main key. One that cannot be read now stays reserved for this source if it held
  // it: deleting the old key's Secret before its reference must not hand the key, and the old
  // apps' traffic, to a copy waiting with DuplicateWriteKey.
  const notes = (result.skipped ?? []).map((p) => `${p.field} is not accepted: ${p.message}`);
  const additionalWriteKeys = (result.value.additionalWriteKeys ?? []).filter((k) => {
    const holder = owners.get(k.sha256);
    if (holder && live(holder)) notes.push(`additional write key ${k.secretKey} is not accepted: ${holderName(holder)} already uses it`);
    return !(holder && live(holder));
  });
  const held = [...(previous?.additionalWriteKeys ?? []), ...(previous?.reservedWriteKeys ?? [])];
  const reservedWriteKeys = (result.skipped ?? []).flatMap((p) => held.filter((k) => k.secretKey === p.secretKey && !owners.has(k.sha256)));
  if (reservedWriteKeys.length > 0) notes.push(`${reservedWriteKeys.length === 1 ? "that key stays" : "those keys stay"} reserved for this source`);
  const value: CompiledSource = { ...result.value };
  delete value.additionalWriteKeys;
  if (additionalWriteKeys.length > 0) value.additionalWriteKeys = additionalWriteKeys;
  if (reservedWriteKeys.length > 0) value.reservedWriteKeys = reservedWriteKeys;
  for (const digest of writeKeyDigests(value)) {
    const holder = owners.get(digest);
    if (holder && !live(holder)) {
      digests.delete(holder);
      await ctx.config.delete(sourceKey(...(holder.split("/") as [string, string])));
    }
  }
  const keys = sourceKeysOf(value);
  digests.set(id, keys);
  if (!previous || writeKeyDigests(previous).join() !== writeKeyDigests(keys).join()) requeueRefused(ctx, id);
  const changed = await ctx.config.put(key, value);
  if (changed) ctx.log.info({ source: `${namespace}/${name}`, enabled: value.enabled }, "source config written");
  const count = 1 + (value.additionalWriteKeys?.length ?? 0);
  const accepted = count === 1 ? "the write key is accepted by ingest" : `its ${count} write keys are accepted by ingest`;
  // A left-out additional key is said here, and in an Event when Ready's reason changes.
  const skipped = notes.map((note) => `; ${note}`).join("");
  await setReady(ctx, source, {
    status: "True",
    reason: skipped ? "AdditionalWriteKeySkipped" : "Reconciled",
    message: (value.enabled ? accepted : "disabled: the write keys are refused as unknown") + skipped,
  }, unsetField(source.status, "writeKeyHeldElsewhere"), skipped !== "");
}

/** The keys of a compiled source that decide who holds which key. */
export function sourceKeysOf(source: CompiledSource): SourceKeys {
  return {
    writeKeySha256: source.writeKeySha256,
    ...(source.additionalWriteKeys ? { additionalWriteKeys: source.additionalWriteKeys } : {}),
    ...(source.reservedWriteKeys ? { reservedWriteKeys: source.reservedWriteKeys } : {}),
  };
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
