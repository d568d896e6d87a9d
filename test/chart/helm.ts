// Renders charts/trackhook with the pinned helm (.tools/bin, else PATH) and parses the documents;
// shared by test/chart (pure rendering) and test/kube/chart.test.ts (server-side dry run).
import { execFile } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { parseAllDocuments } from "yaml";

const execFileAsync = promisify(execFile);

export const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
export const chartDir = join(repoRoot, "charts", "trackhook");
export const fullValues = join(chartDir, "ci", "full-values.yaml");

/** A pinned tool of .tools/bin (helm, promtool), else one on PATH. */
export function toolBinary(name: string): string {
  const candidates = [join(repoRoot, ".tools", "bin", name), ...(process.env.PATH ?? "").split(delimiter).filter(Boolean).map((d) => join(d, name))];
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // next
    }
  }
  throw new Error(`${name} not found in .tools/bin or on PATH: run npm run tools`);
}


export interface ToolResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a tool of toolBinary(); never throws: a failure is its exit code and output. */
export async function runTool(name: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<ToolResult> {
  try {
    const { stdout, stderr } = await execFileAsync(toolBinary(name), args, { maxBuffer: 64 * 1024 * 1024, ...options });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === "number" ? e.code : 1, stdout: e.stdout ?? "", stderr: e.stderr ?? String(err) };
  }
}

/** helm with its own cache/config dirs untouched by the caller's environment; never throws. */
export function helm(args: string[], options: { kubeconfig?: string } = {}): Promise<ToolResult> {
  return runTool("helm", [...args, ...(options.kubeconfig ? ["--kubeconfig", options.kubeconfig] : [])], {
    env: { ...process.env, ...(options.kubeconfig ? { KUBECONFIG: options.kubeconfig } : {}) },
  });
}

// Rendered manifests are plain JSON-like trees; tests walk them loosely.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Manifest = Record<string, any>;

export interface RenderOptions {
  release?: string;
  namespace?: string;
  valuesFiles?: string[];
  set?: Record<string, string>;
}

export function templateArgs({ release = "th-test", namespace = "trackhook", valuesFiles = [], set = {} }: RenderOptions = {}): string[] {
  return [
    "template", release, chartDir, "--namespace", namespace,
    ...valuesFiles.flatMap((f) => ["--values", f]),
    ...Object.entries(set).flatMap(([k, v]) => ["--set", `${k}=${v}`]),
  ];
}

/** `helm template` as YAML text; throws with helm's message when rendering fails. */
export async function renderText(options: RenderOptions = {}): Promise<string> {
  const result = await helm(templateArgs(options));
  if (result.code !== 0) throw new Error(`helm template failed: ${result.stderr.trim()}`);
  return result.stdout;
}

export function parseManifests(text: string): Manifest[] {
  return parseAllDocuments(text)
    .map((doc) => {
      if (doc.errors.length) throw new Error(`rendered YAML does not parse: ${doc.errors[0]!.message}`);
      return doc.toJSON() as Manifest | null;
    })
    .filter((m): m is Manifest => m !== null && typeof m === "object");
}

export async function render(options: RenderOptions = {}): Promise<Manifest[]> {
  return parseManifests(await renderText(options));
}

export const describeManifest = (m: Manifest) => `${m.kind}/${m.metadata?.name}`;

/** The pod template of a workload, if it has one. */
export function podSpec(m: Manifest): Manifest | undefined {
  return m.kind === "Deployment" || m.kind === "StatefulSet" || m.kind === "DaemonSet" ? m.spec?.template?.spec : undefined;
}
