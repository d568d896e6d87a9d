// The logger redacts secrets by path: what a config document or a compiled destination would
// carry never reaches a log line, whichever secret field holds it.
import { describe, expect, it } from "vitest";
import { createLogger } from "../../dataplane/logging.ts";

function logged(object: Record<string, unknown>): string {
  const lines: string[] = [];
  createLogger({ level: "info", destination: { write: (line: string) => lines.push(line) } }).info(object, "logged");
  return lines.join("");
}

describe("log redaction", () => {
  it("redacts write keys, shared secrets and additional shared secrets, at the top level and one level down", () => {
    const secrets = { writeKey: "wk-1", sharedSecret: "ss-1", additionalSharedSecrets: ["old-1", "older-1"] };
    for (const object of [secrets, { destination: secrets }, { req: { headers: { authorization: "Basic d2stMTo=" } } }]) {
      const line = logged(object);
      expect(line).toContain("[redacted]");
      expect(line).not.toMatch(/wk-1|ss-1|old-1|older-1|d2stMTo/);
    }
    // Not a secret: left as it is.
    expect(logged({ destination: { name: "crm", urls: ["https://a.example/"] } })).toContain('"name":"crm"');
  });
});
