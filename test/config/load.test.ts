// Reading `--config` files: a reload parses only the files whose text changed (found by a review:
// parsing a tenant's file of 3,000 documents again at every edit of another's held the event
// loop, and the ingest's requests, for seconds).
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { ConfigError } from "../../dataplane/config/errors.ts";
import { loadDocuments, type ParsedFiles } from "../../dataplane/config/load.ts";
import { loadConfigFile } from "../../dataplane/config/provider.ts";
import { tempDir } from "../harness/temp.ts";

const secret = (name: string, key: string) => `apiVersion: v1\nkind: Secret\nmetadata: { name: ${name} }\nstringData: { writeKey: ${key} }\n`;

describe("loadDocuments with the files parsed before", () => {
  it("parses again only a file whose text changed, and forgets a file that is gone", () => {
    const dir = tempDir("load");
    writeFileSync(join(dir, "a.yaml"), secret("a", "ka"));
    writeFileSync(join(dir, "b.yaml"), secret("b", "kb"));
    const parsed: ParsedFiles = new Map();
    loadDocuments(dir, parsed);
    const a = parsed.get(join(dir, "a.yaml"));
    const b = parsed.get(join(dir, "b.yaml"));

    writeFileSync(join(dir, "b.yaml"), secret("b", "kb2"));
    const documents = loadDocuments(dir, parsed);
    expect(parsed.get(join(dir, "a.yaml"))).toBe(a); // not parsed again
    expect(parsed.get(join(dir, "b.yaml"))).not.toBe(b);
    expect(documents.map((d) => (d.body as { stringData: { writeKey: string } }).stringData.writeKey)).toEqual(["ka", "kb2"]);

    // What is handed out is a copy: compiling fills in defaults, and what is kept stays as parsed.
    (documents[0]!.body as Record<string, unknown>).extra = true;
    expect(loadDocuments(dir, parsed)[0]!.body).not.toHaveProperty("extra");

    rmSync(join(dir, "b.yaml"));
    expect(loadDocuments(dir, parsed)).toHaveLength(1);
    expect([...parsed.keys()]).toEqual([join(dir, "a.yaml")]);
  });

  it("still refuses an unchanged file with a syntax error", () => {
    const dir = tempDir("load");
    writeFileSync(join(dir, "a.yaml"), secret("a", "ka"));
    writeFileSync(join(dir, "broken.yaml"), "kind: [unclosed\n");
    const parsed: ParsedFiles = new Map();
    expect(() => loadDocuments(dir, parsed)).toThrow(ConfigError);
    writeFileSync(join(dir, "a.yaml"), secret("a", "ka2"));
    expect(() => loadDocuments(dir, parsed)).toThrow(/broken\.yaml, document 1: YAML syntax error/);
  });
});

describe("the README's examples", () => {
  /** The YAML blocks of the README's Configure section, in order: its Sources, then its WebhookDestination. */
  const configureYaml = () => {
    const readme = readFileSync(fileURLToPath(new URL("../../README.md", import.meta.url)), "utf8");
    return [...readme.slice(readme.indexOf("\n## Configure\n")).matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]!);
  };

  it("the Configure section's documents are a config `trackhook dev --config` starts with (regression: it named a Secret it did not define)", () => {
    const [yaml] = configureYaml();
    const dir = tempDir("readme-config");
    writeFileSync(join(dir, "configure.yaml"), yaml!);
    const config = loadConfigFile(join(dir, "configure.yaml"));
    expect(config.sources.map((s) => `${s.namespace}/${s.name}`)).toEqual(["default/website"]);
    expect(config.sources[0]!.additionalWriteKeys).toHaveLength(1);
    expect(config.sources[0]!.rateLimit).toEqual({ perSecond: 500, burst: 1000 });
  });

  it("the Configure section's WebhookDestination loads beside it, its commented additionalSharedSecretRefs too once uncommented", () => {
    const [sources, destination] = configureYaml();
    const dir = tempDir("readme-destination");
    writeFileSync(join(dir, "sources.yaml"), sources!);
    writeFileSync(join(dir, "destination.yaml"), destination!);
    expect(loadConfigFile(dir).destinations.map((d) => [d.name, d.urls.length, d.standardWebhooks])).toEqual([["crm", 1, false]]);
    // As a reader would uncomment it: the lines' own # marks removed, standardWebhooks turned on.
    const uncommented = destination!
      .replace("standardWebhooks: false", "standardWebhooks: true")
      .replace(/^ {2}# (additionalSharedSecretRefs:)/m, "  $1")
      .replace(/^ {2}# {3}(- \{)/m, "    $1");
    expect(uncommented).toContain("\n  additionalSharedSecretRefs:");
    writeFileSync(join(dir, "destination.yaml"), `${uncommented}---\napiVersion: v1\nkind: Secret\nmetadata: { name: crm-webhook-old }\nstringData: { sharedSecret: old-secret }\n`);
    expect(loadConfigFile(dir).destinations[0]).toMatchObject({ name: "crm", standardWebhooks: true, additionalSharedSecrets: ["old-secret"] });
  });
});
