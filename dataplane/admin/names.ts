// What the admin commands share: names checked before they go into subjects.
import { isDnsLabel } from "../../schema/mod.ts";

export interface DestinationRef {
  namespace: string;
  destination: string;
}

/** Names go into subjects: a "." or a wildcard would address other destinations' messages. */
export function checkName(what: string, name: string): void {
  if (!isDnsLabel(name)) throw new TypeError(`${what} "${name}" is not a DNS label (lowercase letters, digits and "-")`);
}

/** A destination's namespace and name, both checked. */
export function checkDestinationRef({ namespace, destination }: DestinationRef): void {
  checkName("namespace", namespace);
  checkName("destination", destination);
}
