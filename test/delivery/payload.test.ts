// Standard Webhooks signatures as the official JavaScript library verifies them: the key is the
// secret base64-decoded (without `whsec_`), padded or not; a secret that is not base64 is raw bytes.
import { randomBytes } from "node:crypto";
import { Webhook } from "standardwebhooks";
import { describe, expect, it } from "vitest";
import { signingKeys, standardWebhookHeaders, xSignature } from "../../dataplane/delivery/payload.ts";

const body = Buffer.from('{"type":"track","event":"Signed"}');

/** Signs as trackhook does (from the secret, and from the destination's prepared key) and verifies with the library. */
function verifies(secret: string, receiver: Webhook): boolean {
  const now = Math.floor(Date.now() / 1000);
  for (const key of [secret, signingKeys(secret).standardWebhooks]) {
    try {
      receiver.verify(body, standardWebhookHeaders("msg_1", now, body, key));
    } catch {
      return false;
    }
  }
  return true;
}

describe("Standard Webhooks signatures, verified by the standardwebhooks library", () => {
  it("an unpadded base64 secret is decoded as the library decodes it (regression: signed with its text, every request 401)", () => {
    const secret = "whsec_YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXoxMjM0NTY";
    expect(verifies(secret, new Webhook(secret))).toBe(true);
  });

  it("base64 secrets of every length, padded and unpadded, with and without whsec_", () => {
    const failed: string[] = [];
    for (let length = 3; length <= 40; length++) {
      const padded = randomBytes(length).toString("base64");
      for (const encoded of [padded, padded.replace(/=+$/, "")]) {
        for (const secret of [`whsec_${encoded}`, encoded]) {
          if (!verifies(secret, new Webhook(secret))) failed.push(secret);
        }
      }
    }
    expect(failed).toEqual([]);
  });

  it("a secret that is not base64 is its raw bytes, verified with the library's raw format", () => {
    for (const secret of ["change-me", "s3cret!", "whsec_not base64", "ab"]) {
      expect(() => new Webhook(secret), secret).toThrow();
      expect(verifies(secret, new Webhook(Buffer.from(secret.startsWith("whsec_") ? secret.slice(6) : secret, "utf8"), { format: "raw" })), secret).toBe(true);
    }
  });

  it("with additional secrets, one signature per secret, the main one first: a receiver holding any one of them verifies", () => {
    const main = `whsec_${randomBytes(24).toString("base64")}`;
    const old = `whsec_${randomBytes(24).toString("base64")}`;
    const other = `whsec_${randomBytes(24).toString("base64")}`;
    const now = Math.floor(Date.now() / 1000);
    const keys = signingKeys(main, [old]);
    const headers = standardWebhookHeaders("msg_1", now, body, keys.standardWebhooks);
    expect(headers["webhook-signature"]).toMatch(/^v1,[A-Za-z0-9+/]+=* v1,[A-Za-z0-9+/]+=*$/);
    expect(headers["webhook-signature"]!.split(" ")[0]).toBe(standardWebhookHeaders("msg_1", now, body, main)["webhook-signature"]);
    expect(headers).toEqual(standardWebhookHeaders("msg_1", now, body, [main, old]));
    expect(() => new Webhook(main).verify(body, headers)).not.toThrow();
    expect(() => new Webhook(old).verify(body, headers)).not.toThrow();
    expect(() => new Webhook(other).verify(body, headers)).toThrow();
    // One key written another way (without whsec_, without padding) adds no second signature of it.
    const bare = main.slice("whsec_".length).replace(/=+$/, "");
    expect(signingKeys(main, [bare, old, old.slice("whsec_".length)]).standardWebhooks).toHaveLength(2);
    // X-Signature carries one digest: the main secret's.
    expect(xSignature(body, keys.xSignature)).toBe(xSignature(body, main));
  });
});
