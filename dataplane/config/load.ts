// Reads `--config <file|dir>`: YAML (or JSON) files of Kubernetes-style documents, the same ones
// a user would `kubectl apply`. A directory contributes its *.yaml, *.yml and *.json files.
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments, type Tags } from "yaml";
import { ConfigError } from "./errors.ts";

export interface RawDocument {
  /** "examples/dev.yaml, document 2": where a user finds it. */
  origin: string;
  body: unknown;
  /** When its file was last written (ms since the epoch), for a new destination's start (compile-resource.ts). */
  modifiedAt?: number;
}

const CONFIG_FILE = /\.(ya?ml|json)$/i;

/**
 * YAML as kubectl reads it (YAML 1.1, go-yaml v2): `yes`, `no`, `on`, `off` are booleans, `010`
 * is 8, `1_000` is 1000, `<<` merges; but `12:30` and `2024-01-01` stay strings, as go-yaml reads
 * base-60 numbers and timestamps so. Found by a review: read as YAML 1.2, `maxInFlight: 010` was
 * 10 in files and 8 in a cluster, and `enabled: off` was refused.
 */
const KUBECTL_YAML = {
  version: "1.1",
  customTags: (tags: Tags) =>
    tags.filter((tag) => (typeof tag === "string" ? !["timestamp", "intTime", "floatTime"].includes(tag) : tag.format !== "TIME" && tag.tag !== "tag:yaml.org,2002:timestamp")),
} as const;

export function configFiles(path: string): string[] {
  let stat;
  try {
    stat = statSync(path);
  } catch {
    throw new ConfigError([`${path}: no such file or directory`]);
  }
  if (!stat.isDirectory()) return [path];
  return readdirSync(path)
    .filter((name) => CONFIG_FILE.test(name) && !name.startsWith("."))
    .sort()
    .map((name) => join(path, name));
}

/**
 * Files parsed before, by path, with the text they were parsed from: a reload parses only what
 * changed. YAML parsing is the cost of a reload (~0.4 ms a document); with thousands of
 * documents in one file, parsing it again at every edit of another held the event loop, and the
 * ingest's requests, for seconds (found by a review).
 */
export type ParsedFiles = Map<string, ParsedFile>;
interface ParsedFile {
  text: string;
  documents: Array<{ origin: string; body: unknown }>;
  problems: string[];
}

export function loadDocuments(path: string, parsed?: ParsedFiles): RawDocument[] {
  const documents: RawDocument[] = [];
  const problems: string[] = [];
  const files = configFiles(path);
  for (const file of files) {
    const text = readFileSync(file, "utf8");
    const modifiedAt = statSync(file).mtimeMs;
    let entry = parsed?.get(file);
    if (entry?.text !== text) {
      entry = parseFile(file, text);
      parsed?.set(file, entry);
    }
    problems.push(...entry.problems);
    // A copy when kept: compiling fills in defaults, and what is kept stays as parsed.
    for (const { origin, body } of entry.documents) documents.push({ origin, body: parsed ? structuredClone(body) : body, modifiedAt });
  }
  for (const file of parsed?.keys() ?? []) if (!files.includes(file)) parsed!.delete(file);
  if (problems.length > 0) throw new ConfigError(problems);
  return documents;
}

function parseFile(file: string, text: string): ParsedFile {
  const documents: ParsedFile["documents"] = [];
  const problems: string[] = [];
  // prettyErrors off: a pretty error quotes the offending line, which may hold a secret.
  parseAllDocuments(text, { prettyErrors: false, ...KUBECTL_YAML }).forEach((doc, index) => {
    const origin = `${file}, document ${index + 1}`;
    const [error] = doc.errors;
    if (error) {
      const before = text.slice(0, error.pos[0]);
      const line = before.split("\n").length;
      const column = before.length - before.lastIndexOf("\n");
      // The parser's message names the construct, never the text (prettyErrors is off).
      problems.push(`${origin}: YAML syntax error at line ${line}, column ${column}: ${error.message} (${error.code})`);
      return;
    }
    const body = doc.toJS();
    if (body === null || body === undefined) return; // an empty document between `---` lines
    // What `kubectl get ... -o yaml` writes: a List of the objects; or a typed list (SecretList,
    // SourceList), whose items may leave their kind and apiVersion to the list's, as kubectl takes them.
    const { kind, apiVersion, items } = body as { kind?: unknown; apiVersion?: unknown; items?: unknown };
    if (typeof kind === "string" && kind.endsWith("List") && Array.isArray(items)) {
      const itemKind = kind === "List" ? undefined : kind.slice(0, -"List".length);
      items.forEach((item: unknown, i) => {
        const typed = itemKind && item !== null && typeof item === "object" && !("kind" in item) ? { kind: itemKind, apiVersion, ...item } : item;
        documents.push({ origin: `${origin}, item ${i + 1}`, body: typed });
      });
    } else documents.push({ origin, body });
  });
  return { text, documents, problems };
}
