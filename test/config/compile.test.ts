// The --config loader: the documents a user would kubectl apply, compiled into the config the data
// plane runs on; every invalid document is reported with its file, document and field.
import { statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, compileConfig, compileDestination, loadConfigFile, loadDocuments, sha256Hex } from "../../dataplane/config/mod.ts";
import type { WebhookDestinationDocument } from "../../schema/mod.ts";
import { tempDir } from "../harness/temp.ts";

function configDir(files: Record<string, string>): string {
  const dir = tempDir("config");
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

const secret = (name: string, key: string, value: string, namespace?: string) => `
apiVersion: v1
kind: Secret
metadata: { name: ${name}${namespace ? `, namespace: ${namespace}` : ""} }
data: { ${key}: ${Buffer.from(value).toString("base64")} }
`;
const source = (name: string, secretName: string, key: string, extra = "") => `
apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: ${name} }
spec: { writeKeySecretRef: { name: ${secretName}, key: ${key} }${extra} }
`;

/** A destination of Source web with one URL unless `extra` (more spec lines, each indented two spaces) gives urls. */
const destination = (name: string, extra = "") => `apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: ${name} }
spec:
  sources: [web]${extra.includes("urls:") ? "" : `\n  urls: ["https://hooks.example.com/in"]`}${extra}
`;

function problemsOf(path: string): string[] {
  try {
    loadConfigFile(path);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).problems;
  }
  throw new Error("expected a ConfigError");
}

describe("compiling config documents", () => {
  it("compiles Sources with their key digests, defaults and namespace `default`", () => {
    const dir = configDir({ "a.yaml": [secret("k", "writeKey", "s3cret"), source("web", "k", "writeKey")].join("---\n") });
    const config = loadConfigFile(dir);
    expect(config.sources).toEqual([{ namespace: "default", name: "web", enabled: true, writeKeySha256: sha256Hex("s3cret") }]);
    expect(JSON.stringify(config)).not.toContain("s3cret");
  });

  it("reads every .yaml/.yml/.json file of a directory, and stringData wins over data", () => {
    const dir = configDir({
      "1-secret.yml": `${secret("k", "writeKey", "from-data")}stringData: { writeKey: from-string-data }\n`,
      "2-source.yaml": source("web", "k", "writeKey"),
      "notes.txt": "ignored",
    });
    expect(loadConfigFile(dir).sources[0]!.writeKeySha256).toBe(sha256Hex("from-string-data"));
  });

  it("compiles a WebhookDestination with secrets resolved and durations in ms", () => {
    const dir = configDir({
      "a.yaml": [
        secret("k", "writeKey", "key-1"),
        secret("hook", "secret", "signing-secret"),
        source("web", "k", "writeKey"),
        `apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: crm }
spec:
  sources: [web]
  urls: [https://hooks.example.com/a]
  sharedSecretRef: { name: hook, key: secret }
  headers: [{ name: X-Team, value: growth }, { name: Authorization, valueFrom: { secretKeyRef: { name: hook, key: secret } } }]
  retryWindow: 1h30m
`,
      ].join("---\n"),
    });
    expect(loadConfigFile(dir).destinations).toEqual([
      {
        namespace: "default", name: "crm", enabled: true, sources: ["web"], urls: ["https://hooks.example.com/a"],
        headers: [{ name: "X-Team", value: "growth" }, { name: "Authorization", value: "signing-secret" }],
        sharedSecret: "signing-secret", timeoutMs: 5000, retryWindowMs: 5_400_000, maxInFlight: 100, standardWebhooks: false,
        // Just written: its consumer, if made now, starts when the file was written.
        createdAt: new Date(Math.floor(statSync(join(dir, "a.yaml")).mtimeMs)).toISOString(),
      },
    ]);
  });

  it("takes a destination's start from its file's last write only while that is recent, and from creationTimestamp first", () => {
    const stamped = new Date(Date.now() - 60_000).toISOString();
    const dir = configDir({
      "a.yaml": [
        secret("k", "writeKey", "key-1"),
        source("web", "k", "writeKey"),
        destination("old"),
        destination("stamped").replace("metadata: { name: stamped }", `metadata: { name: stamped, creationTimestamp: "${stamped}" }`),
      ].join("---\n"),
    });
    const hourAgo = new Date(Date.now() - 3_600_000);
    utimesSync(join(dir, "a.yaml"), hourAgo, hourAgo);
    // Written an hour ago: enabling it again now must not replay that hour.
    const [old, withStamp] = loadConfigFile(dir).destinations;
    expect(old).not.toHaveProperty("createdAt");
    expect(withStamp!.createdAt).toBe(stamped);
  });

  it("compiles only the part a component runs on, with that part's Secrets: delivery's copy needs no write keys, ingest's no shared secrets (found by a VM install review)", () => {
    // Neither the Source's write key Secret nor the destination's shared secret is in the files.
    const dir = configDir({ "a.yaml": [source("web", "keys", "writeKey"), destination("crm", "\n  sharedSecretRef: { name: signing, key: secret }")].join("---\n") });
    expect(problemsOf(dir)).toEqual([
      expect.stringMatching(/Source web\): spec.writeKeySecretRef: Secret default\/keys does not exist$/),
      expect.stringMatching(/WebhookDestination crm\): spec.sharedSecretRef: Secret default\/signing does not exist$/),
    ]);
    expect(() => loadConfigFile(dir, undefined, "destinations")).toThrow(/sharedSecretRef/);
    expect(() => loadConfigFile(dir, undefined, "sources")).toThrow(/writeKeySecretRef/);
    const withSecret = configDir({ "a.yaml": [secret("signing", "secret", "s3cret"), source("web", "keys", "writeKey"), destination("crm", "\n  sharedSecretRef: { name: signing, key: secret }")].join("---\n") });
    const forDelivery = loadConfigFile(withSecret, undefined, "destinations");
    expect(forDelivery.sources).toEqual([]);
    expect(forDelivery.destinations).toMatchObject([{ name: "crm", sources: ["web"], sharedSecret: "s3cret" }]);
    const withKey = configDir({ "a.yaml": [secret("keys", "writeKey", "k1"), source("web", "keys", "writeKey"), destination("crm", "\n  sharedSecretRef: { name: signing, key: secret }")].join("---\n") });
    const forIngest = loadConfigFile(withKey, undefined, "sources");
    expect(forIngest).toEqual({ sources: [expect.objectContaining({ name: "web", writeKeySha256: sha256Hex("k1") })], destinations: [] });
    // The other part is still checked against its schema, and a destination still names Sources that exist.
    expect(() => loadConfigFile(configDir({ "a.yaml": [secret("keys", "writeKey", "k1"), source("web", "keys", "writeKey"), destination("crm", "\n  timeout: soon")].join("---\n") }), undefined, "sources")).toThrow(/spec.timeout/);
    expect(() => loadConfigFile(configDir({ "a.yaml": destination("crm") }), undefined, "destinations")).toThrow(/spec.sources\[0\]: no Source "web" in namespace default/);
  });

  it("names the file, document and field of a schema violation", () => {
    const dir = configDir({ "bad.yaml": [secret("k", "writeKey", "x"), source("web", "k", "writeKey", ", enabled: maybe")].join("---\n") });
    const [problem] = problemsOf(dir);
    expect(problem).toContain(join(dir, "bad.yaml"));
    expect(problem).toContain("document 2 (Source web)");
    expect(problem).toContain("spec.enabled: must be boolean");
  });

  it("reports a missing Secret, and a missing key of a Secret, with the field that references it", () => {
    const dir = configDir({ "a.yaml": [secret("k", "other", "x"), source("web", "nope", "writeKey"), source("app", "k", "writeKey")].join("---\n") });
    expect(problemsOf(dir)).toEqual([
      expect.stringMatching(/Source web\): spec.writeKeySecretRef: Secret default\/nope does not exist$/),
      expect.stringMatching(/Source app\): spec.writeKeySecretRef: Secret default\/k has no key "writeKey"$/),
    ]);
  });

  it("refuses a write key with a trailing newline and a header value with a line break, naming the field", () => {
    const dir = configDir({
      "a.yaml": [
        secret("k", "writeKey", "key-with-newline\n"),
        secret("tok", "token", "Bearer abc\n"),
        source("web", "k", "writeKey"),
        secret("k2", "writeKey", "fine"),
        source("app", "k2", "writeKey"),
        `apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: hook }
spec:
  sources: [app]
  urls: ["https://hooks.example.com/in"]
  headers: [{ name: Authorization, valueFrom: { secretKeyRef: { name: tok, key: token } } }]
`,
      ].join("---\n"),
    });
    expect(problemsOf(dir)).toEqual([
      expect.stringMatching(/Source web\): spec.writeKeySecretRef: the write key in Secret default\/k starts or ends with whitespace/),
      expect.stringMatching(/WebhookDestination hook\): spec.headers\[0\].valueFrom.secretKeyRef: the value of header Authorization contains a line break/),
    ]);
  });

  it("rejects a Source name that cannot be a NATS subject token", () => {
    const dir = configDir({ "a.yaml": [secret("k", "writeKey", "x"), source("web.site", "k", "writeKey")].join("---\n") });
    expect(problemsOf(dir).join("\n")).toMatch(/metadata.name: must match pattern/);
  });

  it("rejects unknown kinds, unknown spec fields, six URLs, ftp URLs and unknown sources, all at once", () => {
    const dir = configDir({
      "a.yaml": [
        secret("k", "writeKey", "x"),
        source("web", "k", "writeKey"),
        "apiVersion: trackhook.io/v1alpha1\nkind: Sorce\nmetadata: { name: typo }\n",
        `apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: six }
spec: { sources: [web], urls: [http://a.example, http://b.example, http://c.example, http://d.example, http://e.example, http://f.example] }
`,
        `apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: ftp }
spec: { sources: [web], urls: [ftp://files.example/x], colour: blue }
`,
        `apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: ghost }
spec: { sources: [mobile], urls: [https://a.example] }
`,
      ].join("---\n"),
    });
    const text = problemsOf(dir).join("\n");
    expect(text).toMatch(/document 3 \(Sorce typo\): kind must be one of/);
    expect(text).toMatch(/WebhookDestination six\): spec.urls: must NOT have more than 5 items/);
    expect(text).toMatch(/WebhookDestination ftp\): spec.urls\[0\]: is not valid: An http or https URL that receives POSTed messages/);
    expect(text).toMatch(/WebhookDestination ftp\): spec: has unknown field "colour"/);
    expect(text).toMatch(/WebhookDestination ghost\): spec.sources\[0\]: no Source "mobile" in namespace default/);
  });

  it("reads what `kubectl get -o yaml` writes (a List, with server fields), and passes over other Kubernetes kinds (found by a review: both refused the whole config)", () => {
    const exported = {
      apiVersion: "v1",
      kind: "List",
      metadata: { resourceVersion: "" },
      items: [
        { apiVersion: "v1", kind: "Secret", type: "Opaque", metadata: { name: "k", namespace: "shop", uid: "u-1", resourceVersion: "12", managedFields: [{ manager: "kubectl" }] }, data: { writeKey: Buffer.from("shop-key").toString("base64") } },
        { apiVersion: "trackhook.io/v1alpha1", kind: "Source", metadata: { name: "web", namespace: "shop", generation: 2, finalizers: ["trackhook.io/cleanup"] }, spec: { writeKeySecretRef: { name: "k", key: "writeKey" } }, status: { observedGeneration: 2 } },
      ],
    };
    const dir = configDir({
      "export.yaml": JSON.stringify(exported),
      "namespace.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: { name: shop }\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: { name: app }\nspec: {}\n",
    });
    const config = loadConfigFile(dir);
    expect(config.sources).toMatchObject([{ namespace: "shop", name: "web", writeKeySha256: sha256Hex("shop-key") }]);
  });

  it("still refuses a document without a kind, and one of our kinds under another apiVersion", () => {
    const dir = configDir({ "a.yaml": "apiVersion: v1\nmetadata: { name: x }\n---\napiVersion: v1\nkind: Source\nmetadata: { name: web }\nspec: { writeKeySecretRef: { name: k, key: writeKey } }\n" });
    const text = problemsOf(dir).join("\n");
    expect(text).toMatch(/document 1 \(no kind x\): kind must be one of/);
    expect(text).toMatch(/document 2 \(Source web\): apiVersion/);
  });

  it("rejects credentials in webhook URLs, and Standard Webhooks without a shared secret", () => {
    const dir = configDir({
      "a.yaml": [secret("k", "writeKey", "x"), source("web", "k", "writeKey"), `apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: creds }
spec: { sources: [web], urls: ["https://user:pw@hooks.example.com/in"] }
`, `apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: nokey }
spec: { sources: [web], urls: ["https://hooks.example.com/in"], standardWebhooks: true }
`].join("---\n"),
    });
    const text = problemsOf(dir).join("\n");
    expect(text).toMatch(/WebhookDestination creds\): spec.urls\[0\]: is not valid: .*no credentials in it: use headers/);
    expect(text).toMatch(/WebhookDestination nokey\): spec.standardWebhooks: needs spec.sharedSecretRef/);
  });

  it("rejects custom headers that trackhook sets itself or that break HTTP framing, and a header given twice", () => {
    const dir = configDir({
      "a.yaml": [secret("k", "writeKey", "x"), source("web", "k", "writeKey"), `apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: hdr }
spec:
  sources: [web]
  urls: ["https://hooks.example.com/in"]
  headers: [{ name: Content-Length, value: "3" }, { name: X-Team, value: a }, { name: x-team, value: b }, { name: User-Agent, value: mine }]
`].join("---\n"),
    });
    const text = problemsOf(dir).join("\n");
    expect(text).toMatch(/WebhookDestination hdr\): spec.headers\[0\].name: Content-Length is set by trackhook itself/);
    expect(text).toMatch(/WebhookDestination hdr\): spec.headers\[2\].name: x-team is given twice/);
    expect(text).not.toMatch(/headers\[(1|3)\]/);
  });

  it("explains a field by its description rather than by its pattern or bare type", () => {
    const dir = configDir({
      "a.yaml": [secret("k", "writeKey", "x"), source("web", "k", "writeKey"), `apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: durations }
spec: { sources: [web], urls: ["https://hooks.example.com/in"], timeout: 5, retryWindow: 4 hours }
`].join("---\n"),
    });
    const text = problemsOf(dir).join("\n");
    expect(text).toMatch(/spec.timeout: must be string \(Time allowed for one whole request, e.g. 5s \(from 1s to 30s\).\)/);
    // A duration field says what a duration looks like (found by a review: PT4H and 1d got the description only).
    expect(text).toMatch(/spec.retryWindow: "4 hours" is not a duration \(a number and a unit: ms, s, m, h; e.g. 4h, 90m, 1h30m\)/);
    expect(text).not.toMatch(/pattern/);
  });

  it("rejects URLs no request can go to, and one URL listed twice (regression: accepted, then every message dead-lettered or sent twice)", () => {
    const dir = configDir({
      "a.yaml": [secret("k", "writeKey", "x"), source("web", "k", "writeKey"), destination("urls", `
  urls: ["http://:47311/ok", "http://example.com:99999/x", "http://example.com:0/x", "https://Hooks.example.com", "https://hooks.example.com/"]`)].join("---\n"),
    });
    expect(problemsOf(dir)).toEqual([
      expect.stringMatching(/document 3 \(WebhookDestination urls\): spec.urls\[0\]: needs a host, and a port \(if given\) from 1 to 65535$/),
      expect.stringMatching(/WebhookDestination urls\): spec.urls\[1\]: needs a host, and a port \(if given\) from 1 to 65535$/),
      expect.stringMatching(/WebhookDestination urls\): spec.urls\[2\]: needs a host, and a port \(if given\) from 1 to 65535$/),
      expect.stringMatching(/WebhookDestination urls\): spec.urls\[4\]: is listed twice: the receiver would get every message twice \(as spec.urls\[3\]\)$/),
    ]);
  });

  it("takes URLs with an IPv6 host, an explicit port or an empty one", () => {
    const dir = configDir({
      "a.yaml": [secret("k", "writeKey", "x"), source("web", "k", "writeKey"), destination("ok", `
  urls: ["http://[::1]:8080/in", "https://hooks.example.com:65535/in", "http://hooks.example.com:/in"]`)].join("---\n"),
    });
    expect(loadConfigFile(dir).destinations[0]!.urls).toHaveLength(3);
  });

  it("rejects a header value HTTP cannot carry, naming the header (regression: every message dead-lettered as network_error, no request sent)", () => {
    const dir = configDir({
      "a.yaml": [secret("k", "writeKey", "x"), secret("tok", "token", "Bearer 😀"), source("web", "k", "writeKey"), destination("hdr", `
  headers:
    - { name: X-Emoji, value: "hi 😀" }
    - { name: X-Bell, value: "a\\u0007b" }
    - { name: X-Latin, value: "café\\tau lait" }
    - { name: Authorization, valueFrom: { secretKeyRef: { name: tok, key: token } } }`)].join("---\n"),
    });
    expect(problemsOf(dir)).toEqual([
      expect.stringMatching(/WebhookDestination hdr\): spec.headers\[0\].value: the value of header X-Emoji may hold only tabs, spaces, visible ASCII and Latin-1 characters .*; it has U\+1F600$/),
      expect.stringMatching(/spec.headers\[1\].value: the value of header X-Bell may hold only .*; it has U\+0007$/),
      // A Secret's value is never shown, not even one character of it.
      expect.stringMatching(/spec.headers\[3\].valueFrom.secretKeyRef: the value of header Authorization may hold only .*\(HTTP allows no others in a header\)$/),
    ]);
  });

  it("rejects a shared secret with a trailing newline, as write keys and header values (regression: every signature was wrong)", () => {
    const dir = configDir({
      "a.yaml": [secret("k", "writeKey", "x"), secret("hook", "secret", "signing-secret\n"), source("web", "k", "writeKey"), destination("signed", `
  sharedSecretRef: { name: hook, key: secret }`)].join("---\n"),
    });
    expect(problemsOf(dir)).toEqual([
      expect.stringMatching(/WebhookDestination signed\): spec.sharedSecretRef: the shared secret in Secret default\/hook starts or ends with whitespace \(a trailing newline from --from-file\?\)$/),
    ]);
  });

  it("bounds timeout and retryWindow, naming the field (regression: 0s failed with only destinations[0].timeoutMs, 9999999999h overflowed ack_wait)", () => {
    const dir = configDir({
      "a.yaml": [
        secret("k", "writeKey", "x"),
        source("web", "k", "writeKey"),
        destination("zero", "\n  timeout: 0s\n  retryWindow: 0s"),
        destination("tiny", "\n  timeout: 0.1ms"),
        destination("huge", "\n  timeout: 9999999999h\n  retryWindow: 169h"),
      ].join("---\n"),
    });
    expect(problemsOf(dir)).toEqual([
      expect.stringMatching(/document 3 \(WebhookDestination zero\): spec.timeout: 0s must be from 1s to 30s$/),
      expect.stringMatching(/document 3 \(WebhookDestination zero\): spec.retryWindow: 0s must be from 1s to 168h$/),
      expect.stringMatching(/document 4 \(WebhookDestination tiny\): spec.timeout: 0.1ms must be from 1s to 30s$/),
      expect.stringMatching(/document 5 \(WebhookDestination huge\): spec.timeout: 9999999999h must be from 1s to 30s$/),
      expect.stringMatching(/document 5 \(WebhookDestination huge\): spec.retryWindow: 169h must be from 1s to 168h$/),
    ]);
  });

  it("takes the bounds themselves: seconds-long retry windows (as tests use) up to a week", () => {
    const dir = configDir({
      "a.yaml": [secret("k", "writeKey", "x"), source("web", "k", "writeKey"), destination("low", "\n  timeout: 1s\n  retryWindow: 1s"), destination("high", "\n  timeout: 30s\n  retryWindow: 168h")].join("---\n"),
    });
    expect(loadConfigFile(dir).destinations.map((d) => [d.timeoutMs, d.retryWindowMs])).toEqual([[1000, 1000], [30_000, 604_800_000]]);
  });

  it("rejects two Sources sharing one write key", () => {
    const dir = configDir({ "a.yaml": [secret("k", "writeKey", "same"), source("a", "k", "writeKey"), source("b", "k", "writeKey")].join("---\n") });
    expect(problemsOf(dir).join("\n")).toMatch(/same write key is already used by Source default\/a/);
  });

  it("reports YAML syntax errors with their file and line, without quoting the line (it may hold a secret)", () => {
    const dir = configDir({ "broken.yaml": 'apiVersion: v1\nkind: Secret\nmetadata: { name: k }\nstringData: { writeKey: "super-secret-123\n' });
    const [problem] = problemsOf(dir);
    expect(problem).toMatch(/broken\.yaml, document 1: YAML syntax error at line \d+, column \d+: .+ \([A-Z_]+\)$/);
    expect(problem).not.toContain("super-secret-123");
  });

  it("reports a missing path", () => {
    expect(problemsOf("/no/such/trackhook/config")).toEqual(["/no/such/trackhook/config: no such file or directory"]);
  });
});

describe("the same YAML in files as in a cluster (found by a parity review: files took what kubectl refuses, or read it otherwise)", () => {
  const keyOf = (dir: string) => loadConfigFile(dir).sources[0]!.writeKeySha256;

  it("refuses a Secret's data that is not base64, as kubectl does, without quoting it (it became a garbage write key or signing secret)", () => {
    for (const value of ["app-write-key-2025", "ZGV2LXdyaXRlLWtleQ", "ZGV2_d3JpdGU-a2V5"]) {
      const dir = configDir({ "a.yaml": `apiVersion: v1\nkind: Secret\nmetadata: { name: k }\ndata: { writeKey: ${value} }\n---\n${source("web", "k", "writeKey")}` });
      const problems = problemsOf(dir);
      expect(problems).toEqual([
        expect.stringMatching(/\(Secret k\): data\.writeKey: is not valid: a value under data is base64, as kubectl requires; put plain text under stringData$/),
        expect.stringMatching(/\(Source web\): spec\.writeKeySecretRef: Secret default\/k is not valid \(see its document\)$/),
      ]);
      expect(problems.join("\n")).not.toContain(value);
    }
  });

  it("reads a Secret's base64 padded, or broken over lines as a YAML block writes it", () => {
    const padded = Buffer.from("dev-write-key").toString("base64");
    expect(keyOf(configDir({ "a.yaml": [secret("k", "writeKey", "dev-write-key"), source("web", "k", "writeKey")].join("---\n") }))).toBe(sha256Hex("dev-write-key"));
    const lines = `apiVersion: v1\nkind: Secret\nmetadata: { name: k }\ndata:\n  writeKey: |\n    ${padded.slice(0, 8)}\n    ${padded.slice(8)}\n---\n${source("web", "k", "writeKey")}`;
    expect(keyOf(configDir({ "a.yaml": lines }))).toBe(sha256Hex("dev-write-key"));
  });

  it("checks a DeletionRequest and passes over it, saying so: it stopped dev and delete-user on a folder that keeps them", () => {
    const request = "apiVersion: trackhook.io/v1alpha1\nkind: DeletionRequest\nmetadata: { name: gdpr }\nspec: { userIds: [u1] }\n";
    const dir = configDir({ "a.yaml": [secret("k", "writeKey", "s3cret"), source("web", "k", "writeKey"), request].join("---\n") });
    const passedOver: string[] = [];
    expect(compileConfig(loadDocuments(dir), "all", passedOver).sources).toHaveLength(1);
    expect(passedOver).toEqual([expect.stringMatching(/\(DeletionRequest gdpr\): passed over: the operator acts on a DeletionRequest in a cluster; without one, send its notices with `trackhook delete-user/)]);
    const broken = configDir({ "a.yaml": request.replace("userIds: [u1]", "userIds: []") });
    expect(problemsOf(broken)).toEqual([expect.stringMatching(/\(DeletionRequest gdpr\): spec\.userIds: must NOT have fewer than 1 items$/)]);
  });

  it("reads YAML 1.1 as kubectl does: yes/no/on/off are booleans, 010 is 8, 1_000 is 1000, << merges; 12:30 and dates stay strings", () => {
    const dir = configDir({
      "a.yaml": [
        secret("k", "writeKey", "s3cret"),
        source("web", "k", "writeKey"),
        `apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: octal, annotations: { since: 2024-01-01 } }
spec:
  sources: [web]
  urls: ["https://hooks.example.com/in"]
  maxInFlight: 010
  enabled: off
  headers: [{ name: X-Window, value: 12:30 }]
`,
        `apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: merged }
spec:
  <<: { sources: [web], timeout: 10s }
  urls: ["https://hooks.example.com/in"]
  maxInFlight: 1_000
  enabled: yes
`,
      ].join("---\n"),
    });
    const byName = new Map(loadConfigFile(dir).destinations.map((d) => [d.name, d]));
    expect(byName.get("octal")).toMatchObject({ maxInFlight: 8, enabled: false, headers: [{ name: "X-Window", value: "12:30" }] });
    expect(byName.get("merged")).toMatchObject({ maxInFlight: 1000, enabled: true, timeoutMs: 10_000, sources: ["web"] });
    // `value: yes` is a boolean to kubectl too, which refuses it.
    const yes = configDir({ "a.yaml": [secret("k", "writeKey", "s3cret"), source("web", "k", "writeKey"), destination("d", "\n  headers: [{ name: X-On, value: yes }]")].join("---\n") });
    expect(problemsOf(yes)).toEqual([expect.stringMatching(/\(WebhookDestination d\): spec\.headers\[0\]\.value: must be string .*; YAML read it as a boolean \(in YAML 1\.1, as kubectl reads it, yes, no, on, off, y and n are booleans\): quote it$/)]);
  });

  it("refuses a field Kubernetes does not know, and label values it refuses; takes what `kubectl get -o yaml` writes", () => {
    const stray = configDir({ "a.yaml": [secret("k", "writeKey", "s3cret"), `${source("web", "k", "writeKey")}labels: { tier: front }\n`].join("---\n") });
    expect(problemsOf(stray)).toEqual([expect.stringMatching(/\(Source web\): \(document\): has unknown field "labels"$/)]);
    const spaced = configDir({ "a.yaml": [secret("k", "writeKey", "s3cret"), source("web", "k", "writeKey").replace("{ name: web }", "{ name: web, labels: { tier: growth team } }")].join("---\n") });
    expect(problemsOf(spaced)).toEqual([expect.stringMatching(/\(Source web\): metadata\.labels\.tier: is not valid: a label value is empty or up to 63/)]);
    const exported = configDir({
      "a.yaml": `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Secret
  type: Opaque
  metadata: { name: k, namespace: default, uid: 5d1c, resourceVersion: "42", creationTimestamp: null, managedFields: [{ manager: kubectl }] }
  data: { writeKey: ${Buffer.from("s3cret").toString("base64")} }
- apiVersion: trackhook.io/v1alpha1
  kind: Source
  metadata: { name: web, namespace: default, uid: 7e2a, generation: 3, finalizers: [trackhook.io/cleanup], creationTimestamp: "2026-11-25T10:00:00Z" }
  spec: { writeKeySecretRef: { name: k, key: writeKey }, displayName: ~ }
  status: { conditions: [{ type: Ready, status: "True" }], observedGeneration: 3 }
`,
    });
    expect(keyOf(exported)).toBe(sha256Hex("s3cret"));
  });

  it("passes over a Secret encrypted with SOPS, saying so, for the plain one of a git-ignored file beside it (found by a review: the folder was refused)", () => {
    const dir = configDir({
      "key.enc.yaml": `apiVersion: v1\nkind: Secret\nmetadata: { name: k }\nstringData: { writeKey: "ENC[AES256_GCM,data:3q2+7w==,iv:AAAA,tag:BBBB,type:str]" }\nsops: { version: 3.9.0, mac: "ENC[AES256_GCM,data:xx]" }\n`,
      "local-secrets.yaml": secret("k", "writeKey", "s3cret"),
      "source.yaml": source("web", "k", "writeKey"),
    });
    const passedOver: string[] = [];
    expect(compileConfig(loadDocuments(dir), "all", passedOver).sources).toEqual([expect.objectContaining({ name: "web", writeKeySha256: sha256Hex("s3cret") })]);
    expect(passedOver).toEqual([expect.stringMatching(/key\.enc\.yaml, document 1 \(Secret k\): passed over: encrypted with SOPS/)]);
  });

  it("takes a Secret whose data a template left empty (`data:`), as kubectl does", () => {
    const dir = configDir({ "a.yaml": `apiVersion: v1\nkind: Secret\nmetadata: { name: k, labels: }\ndata:\nstringData: { writeKey: s3cret }\n---\n${source("web", "k", "writeKey")}` });
    expect(keyOf(dir)).toBe(sha256Hex("s3cret"));
  });

  it("reads a typed list (SecretList, SourceList), its items taking the list's kind as kubectl does", () => {
    const dir = configDir({
      "a.yaml": `apiVersion: v1
kind: SecretList
items:
- metadata: { name: k }
  stringData: { writeKey: s3cret }
---
apiVersion: trackhook.io/v1alpha1
kind: SourceList
items:
- metadata: { name: web }
  spec: { writeKeySecretRef: { name: k, key: writeKey } }
`,
    });
    expect(loadConfigFile(dir).sources).toEqual([expect.objectContaining({ name: "web", writeKeySha256: sha256Hex("s3cret") })]);
  });
});

describe("a WebhookDestination as the operator compiles it", () => {
  // The operator shows the first problem's reason as Ready=False's reason, and the field in its message.
  const compile = (spec: Partial<WebhookDestinationDocument["spec"]>, secrets: Record<string, string> = {}) =>
    compileDestination(
      "shop",
      { apiVersion: "trackhook.io/v1alpha1", kind: "WebhookDestination", metadata: { name: "hook" }, spec: { sources: ["web"], urls: ["https://hooks.example.com/in"], ...spec } },
      [{ name: "web" }],
      (_namespace, name) => (name === "hook-secret" ? new Map(Object.entries(secrets)) : undefined),
    );
  const reasons = (result: ReturnType<typeof compile>) => (result.ok ? [] : result.problems.map((p) => `${p.reason} ${p.field}`));

  it("a shared secret with surrounding whitespace is SecretValueInvalid", () => {
    for (const value of ["s3cret\n", " s3cret", "s3cret\t"]) {
      expect(reasons(compile({ sharedSecretRef: { name: "hook-secret", key: "secret" } }, { secret: value }))).toEqual(["SecretValueInvalid spec.sharedSecretRef"]);
    }
    expect(compile({ sharedSecretRef: { name: "hook-secret", key: "secret" } }, { secret: "s3cret" }).ok).toBe(true);
  });

  describe("additionalSharedSecretRefs (a rotation's other secrets, webhook-signature only)", () => {
    const main = { name: "hook-secret", key: "new" };
    const signed = { sharedSecretRef: main, standardWebhooks: true };

    it("are read after the main secret; the main one listed again, or one secret twice, is signed with once", () => {
      const result = compile(
        { ...signed, additionalSharedSecretRefs: [{ name: "hook-secret", key: "old" }, main, { name: "hook-secret", key: "copy" }, { name: "hook-secret", key: "older" }] },
        { new: "whsec_bmV3", old: "whsec_b2xk", copy: "whsec_b2xk", older: "whsec_b2xkZXI=" },
      );
      expect(result.ok && result.value).toMatchObject({ sharedSecret: "whsec_bmV3", additionalSharedSecrets: ["whsec_b2xk", "whsec_b2xkZXI="] });
      const none = compile({ ...signed, additionalSharedSecretRefs: [] }, { new: "whsec_bmV3" });
      expect(none.ok && "additionalSharedSecrets" in none.value).toBe(false);
    });

    it("one that cannot be read, or has surrounding whitespace, names its field (the last good config keeps signing meanwhile)", () => {
      const refs = [{ name: "hook-secret", key: "gone" }, { name: "hook-secret", key: "spaced" }, { name: "elsewhere", key: "x" }];
      expect(reasons(compile({ ...signed, additionalSharedSecretRefs: refs }, { new: "s3cret", spaced: "old\n" }))).toEqual([
        "SecretKeyMissing spec.additionalSharedSecretRefs[0]",
        "SecretValueInvalid spec.additionalSharedSecretRefs[1]",
        "SecretNotFound spec.additionalSharedSecretRefs[2]",
      ]);
    });

    it("without standardWebhooks they are refused: X-Signature carries one signature", () => {
      const result = compile({ sharedSecretRef: main, additionalSharedSecretRefs: [{ name: "hook-secret", key: "old" }] }, { new: "a", old: "b" });
      expect(result.ok ? [] : result.problems).toEqual([
        { reason: "InvalidSpec", field: "spec.additionalSharedSecretRefs", message: expect.stringMatching(/^needs standardWebhooks: true: only webhook-signature carries several signatures/) },
      ]);
    });
  });

  it("a header value from a Secret that HTTP cannot carry is SecretValueInvalid; a literal one InvalidSpec", () => {
    const result = compile(
      { headers: [{ name: "Authorization", valueFrom: { secretKeyRef: { name: "hook-secret", key: "token" } } }, { name: "X-Emoji", value: "😀" }] },
      { token: "Bearer ✓" },
    );
    expect(reasons(result)).toEqual(["SecretValueInvalid spec.headers[0].valueFrom.secretKeyRef", "InvalidSpec spec.headers[1].value"]);
    expect(JSON.stringify(result)).not.toContain("✓");
  });

  it("bad URLs and out-of-bounds durations are InvalidSpec, each naming its field", () => {
    expect(reasons(compile({ urls: ["http://:47311/ok", "https://a.example/x", "https://a.example/x"], timeout: "0s", retryWindow: "9999999999h" }))).toEqual([
      "InvalidSpec spec.urls[0]",
      "InvalidSpec spec.urls[2]",
      "InvalidSpec spec.timeout",
      "InvalidSpec spec.retryWindow",
    ]);
  });
});

describe("where a destination's consumer starts (its config's createdAt)", () => {
  const NOW = Date.parse("2026-11-22T12:00:00Z");
  const minutesAgo = (minutes: number) => new Date(NOW - minutes * 60_000).toISOString();
  const compileAt = (metadata: Record<string, unknown>, origin: "operator" | "file", status?: Record<string, unknown>) => {
    const doc = { apiVersion: "trackhook.io/v1alpha1", kind: "WebhookDestination", metadata: { name: "hook", ...metadata }, spec: { sources: ["web"], urls: ["https://hooks.example.com/in"] }, ...(status ? { status } : {}) };
    const result = compileDestination("shop", doc as WebhookDestinationDocument, [{ name: "web" }], () => undefined, { origin, now: NOW });
    if (!result.ok) throw new Error(JSON.stringify(result.problems));
    return result.value.createdAt;
  };

  it("from the operator: its creation until it first takes effect, however long and however often edited; then none", () => {
    expect(compileAt({ creationTimestamp: minutesAgo(60 * 24), generation: 5 }, "operator")).toBe(minutesAgo(60 * 24));
    expect(compileAt({ creationTimestamp: minutesAgo(60 * 24), generation: 5 }, "operator", { inEffectSince: minutesAgo(60) })).toBeUndefined();
  });

  it("from a --config file: its creationTimestamp for ten minutes only, so enabling it again later does not replay the stream (regression: an exported document replayed 72 h)", () => {
    expect(compileAt({ creationTimestamp: minutesAgo(5) }, "file")).toBe(minutesAgo(5));
    expect(compileAt({ creationTimestamp: minutesAgo(20), generation: 7 }, "file")).toBeUndefined();
    // A file's status (exported with the resource) is not the operator's record.
    expect(compileAt({ creationTimestamp: minutesAgo(5) }, "file", { inEffectSince: minutesAgo(1) })).toBe(minutesAgo(5));
    expect(compileAt({}, "file")).toBeUndefined();
  });
});

describe("private addresses, as the operator compiles a destination for a delivery without --allow-private-networks", () => {
  const compileUrl = (url: string, refusePrivateNetworks: boolean) => {
    const doc = { apiVersion: "trackhook.io/v1alpha1", kind: "WebhookDestination", metadata: { name: "hook" }, spec: { sources: ["web"], urls: [url] } };
    const result = compileDestination("shop", doc as WebhookDestinationDocument, [{ name: "web" }], () => undefined, { origin: "operator", refusePrivateNetworks });
    return result.ok ? "ok" : result.problems.map((p) => `${p.reason} ${p.field}`).join("; ");
  };

  it("refuses URLs that can only reach a private address (regression: Ready=True while every message was dead-lettered private_address_refused)", () => {
    for (const url of [
      "http://169.254.169.254/latest/meta-data", "http://10.0.0.7:8080/hook", "http://127.0.0.1/hook", "http://[::1]:9000/", "http://[::ffff:192.168.1.2]/",
      "http://localhost:3000/hook", "http://receiver.shop.svc:8080/hook", "http://receiver.shop.svc.cluster.local/hook", "http://app.localhost/",
    ]) {
      expect(compileUrl(url, true), url).toBe("PrivateAddressRefused spec.urls[0]");
      expect(compileUrl(url, false), url).toBe("ok");
    }
  });

  it("takes public addresses and names (a name's address is checked when delivery connects)", () => {
    for (const url of ["https://hooks.example.com/in", "http://203.0.114.9/hook", "https://[2606:4700::1111]/"]) expect(compileUrl(url, true), url).toBe("ok");
  });
});

