// The derived files and their expected content, shared by the generator and the drift test.
import { fileURLToPath } from "node:url";
import { stringify } from "yaml";
import { KINDS, buildCrd } from "../schema/mod.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const header = "# Generated from schema/ by `npm run generate`. Do not edit.\n";

export function generatedFiles(): Array<[path: string, text: string]> {
  const crds: Array<[path: string, text: string]> = KINDS.map((info) => [
    `${root}crds/${info.plural}.trackhook.io.yaml`,
    header + stringify(buildCrd(info), { lineWidth: 0 }),
  ]);
  // The Helm chart ships the same CRDs, byte for byte, in its crds/ directory (not templated).
  const chartCrds = crds.map(([path, text]): [string, string] => [path.replace(`${root}crds/`, `${root}charts/trackhook/crds/`), text]);
  return [...crds, ...chartCrds];
}
