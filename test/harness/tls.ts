// A self-signed certificate for localhost and 127.0.0.1, made with openssl, for HTTPS receivers
// that trackhook must refuse (or trust when told to, through the sender's `ca`).
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "./temp.ts";

/** `subjectAltName`: the names and addresses it is valid for, as openssl takes them. */
export function selfSignedCert(subjectAltName = "DNS:localhost,IP:127.0.0.1"): { key: string; cert: string } {
  const dir = tempDir("tls");
  execFileSync("openssl", [
    "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"),
    "-days", "1", "-subj", "/CN=localhost", "-addext", `subjectAltName=${subjectAltName}`,
  ], { stdio: "ignore" });
  return { key: readFileSync(join(dir, "key.pem"), "utf8"), cert: readFileSync(join(dir, "cert.pem"), "utf8") };
}
