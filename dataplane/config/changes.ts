// What a reload of the config changed, in words: `trackhook dev` prints them as its config line
// and the `config reloaded` log line lists them, so an edit's effect is read, not guessed.
import type { CompiledConfig, CompiledDestination, CompiledSource } from "../../schema/mod.ts";

/** What each changed field is called in the YAML (fields not listed are not the user's to see). */
const SOURCE_FIELDS: Partial<Record<keyof CompiledSource, string>> = {
  writeKeySha256: "write key", additionalWriteKeys: "additional write keys", displayName: "displayName", rateLimit: "rateLimit",
};
const DESTINATION_FIELDS: Partial<Record<keyof CompiledDestination, string>> = {
  sources: "sources", urls: "urls", headers: "headers", sharedSecret: "shared secret", additionalSharedSecrets: "additional shared secrets",
  timeoutMs: "timeout", retryWindowMs: "retryWindow", maxInFlight: "maxInFlight", standardWebhooks: "standardWebhooks",
};
const STOPPED = "nothing more is sent to it; what it has not been sent is kept a minute, in case it comes back";
/**
 * What to say of an enabled destination whose sourceSelector matches no Source (as its Ready
 * condition does in a cluster), or nothing.
 */
export function matchesNoSource(d: CompiledDestination): string | undefined {
  return d.enabled && d.sources.length === 0 ? "its sourceSelector matches no Source: nothing reaches it" : undefined;
}

/**
 * "webhook default/orders added", "source default/website changed (write key)": what a reload
 * changed, named as in the YAML and without a secret's value; none when only what no source or
 * webhook acts on changed (a file's time).
 */
export function configChanges(previous: CompiledConfig, next: CompiledConfig): string[] {
  const changes = [
    ...changesOf("source", previous.sources, next.sources, SOURCE_FIELDS, "its write keys are refused (401) now"),
    // Found by a review: in a cluster, such a destination's Ready condition said so; dev did not.
    ...changesOf("webhook", previous.destinations, next.destinations, DESTINATION_FIELDS, STOPPED, matchesNoSource),
  ];
  return changes;
}

function changesOf<T extends CompiledSource | CompiledDestination>(
  kind: string, before: T[], after: T[], fields: Partial<Record<keyof T, string>>, stopped: string, noteOf: (r: T) => string | undefined = () => undefined,
): string[] {
  const warning = (r: T) => {
    const note = noteOf(r);
    return note ? `: ${note}` : "";
  };
  const key = (r: T) => `${r.namespace}/${r.name}`;
  const was = new Map(before.map((r) => [key(r), r]));
  const is = new Map(after.map((r) => [key(r), r]));
  const changes: string[] = [];
  for (const [name, r] of is) {
    const old = was.get(name);
    if (!old) changes.push(`${kind} ${name} added${r.enabled ? "" : ", disabled"}${warning(r)}`);
    else if (old.enabled !== r.enabled) changes.push(`${kind} ${name} ${r.enabled ? `enabled${warning(r)}` : `disabled: ${stopped}`}`);
    else {
      const changed = (Object.keys(fields) as Array<keyof T>).filter((field) => JSON.stringify(old[field]) !== JSON.stringify(r[field]));
      if (changed.length > 0) changes.push(`${kind} ${name} changed (${changed.map((field) => fields[field]).join(", ")})${warning(r)}`);
    }
  }
  for (const [name, old] of was) if (!is.has(name)) changes.push(`${kind} ${name} removed${old.enabled ? `: ${stopped}` : ""}`);
  return changes;
}
