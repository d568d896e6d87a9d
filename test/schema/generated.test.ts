// crds/*.yaml are generated from schema/; this fails while one is stale (run `npm run generate`).
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { basename, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { generatedFiles } from "../../scripts/generated-files.ts";

const repoRoot = fileURLToPath(new URL("../..", import.meta.url));

describe("generated files", () => {
  for (const [path, text] of generatedFiles()) {
    // By its path in the repository: crds/ and the chart's crds/ hold files of the same names.
    it(`${relative(repoRoot, path)} is up to date with schema/`, () => {
      expect(existsSync(path), `${path} is missing: run npm run generate`).toBe(true);
      expect(readFileSync(path, "utf8"), `${path} is stale: run npm run generate`).toBe(text);
    });
  }

  it("crds/ holds no file the generator does not write", () => {
    const expected = new Set(generatedFiles().map(([path]) => basename(path)));
    expect(readdirSync(new URL("../../crds", import.meta.url)).filter((f) => !expected.has(f))).toEqual([]);
  });

  it("every spec field has a description for kubectl explain", () => {
    const undocumented: string[] = [];
    const walk = (node: Record<string, unknown>, path: string) => {
      const props = node.properties as Record<string, Record<string, unknown>> | undefined;
      for (const [name, child] of Object.entries(props ?? {})) {
        if (!child.description) undocumented.push(`${path}.${name}`);
        walk(child, `${path}.${name}`);
        if (child.items) walk(child.items as Record<string, unknown>, `${path}.${name}[]`);
      }
    };
    for (const [path, text] of generatedFiles()) {
      const crd = parse(text);
      walk(crd.spec.versions[0].schema.openAPIV3Schema.properties.spec, basename(path));
    }
    expect(undocumented).toEqual([]);
  });
});
