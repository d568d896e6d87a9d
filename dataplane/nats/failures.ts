// NATS failures a person can fix, said in one line instead of a nats.js stack trace: the CLI
// prints these and exits 2 (config or credentials), at start of a service or from an admin command.

const NO_JETSTREAM =
  "JetStream does not answer on this NATS: it is not enabled (run nats-server with -js, or a jetstream {} block in its config; with accounts, the account needs JetStream too), or the server is still starting";

/**
 * An error and its causes, outermost first: nats.js wraps what the server said in a RequestError,
 * and "no responders" also in JetStreamNotEnabled.
 */
export function errorChain(err: unknown): Error[] {
  const chain: Error[] = [];
  for (let e = err; e instanceof Error; e = e.cause) chain.push(e);
  return chain;
}

/**
 * What to tell about `err`, or undefined when it is no such failure, looked for along its cause
 * chain ("no responders" whether JetStream's API or a publish went unanswered).
 */
export function natsFailureMessage(err: unknown): string | undefined {
  const chain = errorChain(err);
  const denied = chain.find((e) => e.name === "PermissionViolationError");
  if (denied) {
    // A user limited to inboxes of its own prefix (a team's admin user) must be told which.
    const inbox = /Subscription to "_INBOX\./.test(denied.message) ? "; if this user has inboxes of its own, set TRACKHOOK_NATS_INBOX_PREFIX to their prefix" : "";
    return `the NATS user may not do this: ${denied.message} (docs/nats-permissions.conf has the permissions of each component, of the installation's admin user and of a team's${inbox})`;
  }
  const noResponders = chain.find((e) => e.name === "NoResponders");
  // Nobody behind JetStream's API: also what a server just restarted says until its JetStream is
  // up (the services wait, patiently, before they get here).
  if (noResponders?.message.includes("$JS.API")) return NO_JETSTREAM;
  // A publish nobody answers: no stream takes its subject.
  if (noResponders) return `no stream on this NATS stores what was sent (${noResponders.message}): has ingest or dev run against it?`;
  if (chain.some((e) => e.name === "JetStreamNotEnabled")) return NO_JETSTREAM;
  return undefined;
}
