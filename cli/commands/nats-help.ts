// The NATS credential variables, shown under --nats in every command's help.
export const NATS_AUTH_HELP = `
                             credentials and TLS from the environment only: TRACKHOOK_NATS_CREDS,
                             TRACKHOOK_NATS_USER + _PASSWORD, or TRACKHOOK_NATS_TOKEN; TRACKHOOK_NATS_CA,
                             TRACKHOOK_NATS_CERT + _KEY (docs/operations.md)`;
