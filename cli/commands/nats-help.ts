// The NATS credential variables, shown under --nats in every command's help.
const lines = [
  "credentials and TLS from the environment only: TRACKHOOK_NATS_CREDS,",
  "TRACKHOOK_NATS_USER + _PASSWORD, or TRACKHOOK_NATS_TOKEN; TRACKHOOK_NATS_CA,",
  "TRACKHOOK_NATS_CERT + _KEY; for the admin commands also",
  "TRACKHOOK_NATS_INBOX_PREFIX (docs/operations.md)",
];

/** The lines, each indented to the column where the command's flag descriptions start. */
export const natsAuthHelp = (column = 29): string => lines.map((line) => `\n${" ".repeat(column)}${line}`).join("");

export const NATS_AUTH_HELP = natsAuthHelp();
