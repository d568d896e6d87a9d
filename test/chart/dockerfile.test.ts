// The Dockerfile, checked without a Docker engine: what it copies exists and survives
// .dockerignore, its base images are pinned, it runs non-root under an init, and its entrypoint is
// the file `npm run build` emits for the `trackhook` bin. Runtime imports must be production
// dependencies, since the image installs only those.
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parseDockerfile, type Stage } from "./dockerfile.ts";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));

const dockerfile = readFileSync(join(repoRoot, "Dockerfile"), "utf8");
const pkg = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as {
  bin: Record<string, string>;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  scripts: Record<string, string> & { build: string };
};
const buildConfig = JSON.parse(readFileSync(join(repoRoot, "tsconfig.build.json"), "utf8").replace(/^\s*\/\/.*$/gm, "")) as {
  include: string[];
  compilerOptions: { outDir: string; rootDir: string };
};

/** Docker's .dockerignore semantics: last matching pattern wins; a pattern also matches everything under a matched directory. */
function dockerignored(path: string, patterns: string[]): boolean {
  const toRegex = (glob: string) =>
    new RegExp(
      "^" +
        glob
          .replace(/[.+^${}()|[\]\\]/g, "\\$&")
          .replace(/\*\*\//g, "@@DOUBLESTAR@@")
          .replace(/\*\*/g, ".*")
          .replace(/\*/g, "[^/]*")
          .replace(/\?/g, "[^/]")
          .replace(/@@DOUBLESTAR@@/g, "(?:.*/)?") +
        "$",
    );
  const prefixes = path.split("/").map((_, i, parts) => parts.slice(0, i + 1).join("/"));
  let ignored = false;
  for (const raw of patterns) {
    const negate = raw.startsWith("!");
    const glob = (negate ? raw.slice(1) : raw).replace(/^\/+|\/+$/g, "");
    const re = toRegex(glob);
    if (prefixes.some((p) => re.test(p))) ignored = !negate;
  }
  return ignored;
}

const ignorePatterns = readFileSync(join(repoRoot, ".dockerignore"), "utf8")
  .split("\n")
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith("#"));

function filesUnder(dir: string): string[] {
  return readdirSync(join(repoRoot, dir), { recursive: true, encoding: "utf8" })
    .map((f) => join(dir, f))
    .filter((f) => statSync(join(repoRoot, f)).isFile());
}

const { globalArgs, stages } = parseDockerfile(dockerfile);
const finalStage = stages.at(-1)!;
const resolveArgs = (text: string) => text.replace(/\$\{?(\w+)\}?/g, (_, name: string) => globalArgs.get(name) ?? `\${${name}}`);
const jsonArray = (args: string) => JSON.parse(args) as string[];

describe("Dockerfile", () => {
  it("is multi-stage and every base image is pinned to a version (no latest, no bare tag)", () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    for (const stage of stages) {
      if (stages.some((s) => s.name === stage.from)) continue;
      const image = resolveArgs(stage.from);
      expect(image, `${stage.from} has an unresolved ARG`).not.toMatch(/\$/);
      const tag = /:([^@/]+)(@sha256:[0-9a-f]{64})?$/.exec(image)?.[1];
      expect(tag, `${image} has no tag`).toBeDefined();
      expect(tag).not.toMatch(/latest/);
      expect(tag, `${image}: pin a full version`).toMatch(/^\d+\.\d+\.\d+/);
    }
  });

  it("uses the Node version the repository pins in scripts/versions.sh", () => {
    const pinned = /^NODE_VERSION=(\S+)$/m.exec(readFileSync(join(repoRoot, "scripts/versions.sh"), "utf8"))?.[1];
    expect(globalArgs.get("NODE_VERSION")).toBe(pinned);
  });

  it("copies only paths that exist in the repository and that .dockerignore lets into the build context", () => {
    const sources: string[] = [];
    for (const stage of stages) {
      for (const ins of stage.instructions.filter((i) => i.op === "COPY" && !/--from=/.test(i.args))) {
        const parts = ins.args.split(/\s+/).filter((p) => !p.startsWith("--"));
        sources.push(...parts.slice(0, -1));
      }
    }
    expect(sources.length).toBeGreaterThan(0);
    for (const source of sources) {
      const path = source.replace(/^\.\//, "").replace(/\/$/, "");
      expect(existsSync(join(repoRoot, path)), `COPY ${source}: missing`).toBe(true);
      expect(dockerignored(path, ignorePatterns), `COPY ${source}: excluded by .dockerignore`).toBe(false);
      if (statSync(join(repoRoot, path)).isDirectory()) {
        const sourcesInDir = filesUnder(path).filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts"));
        expect(sourcesInDir.length, `${path} has no sources`).toBeGreaterThan(0);
        for (const file of sourcesInDir) expect(dockerignored(file, ignorePatterns), `${file} is excluded by .dockerignore`).toBe(false);
      }
    }
    // What tsc compiles is copied before it runs.
    for (const dir of buildConfig.include) expect(sources.map((s) => s.replace(/^\.\//, "").replace(/\/$/, ""))).toContain(dir);
    // The build context stays small: no dependencies, tools, build output or git history.
    for (const heavy of ["node_modules/x", ".tools/bin/node", "dist/cli/main.js", ".git/HEAD", "test/chart/dockerfile.test.ts", "charts/trackhook/Chart.yaml"]) {
      expect(dockerignored(heavy, ignorePatterns), `${heavy} should not be in the build context`).toBe(true);
    }
  });

  it("copies between stages only from stages it defines", () => {
    for (const stage of stages) {
      for (const ins of stage.instructions.filter((i) => i.op === "COPY" && /--from=/.test(i.args))) {
        const from = /--from=(\S+)/.exec(ins.args)?.[1];
        expect(stages.map((s) => s.name), `line ${ins.line}`).toContain(from);
      }
    }
  });

  it("installs only production dependencies into the final image", () => {
    const npmInstalls = (stage: Stage) => stage.instructions.filter((i) => i.op === "RUN" && /npm (ci|install)/.test(i.args));
    const copiedModules = finalStage.instructions.find((i) => i.op === "COPY" && /node_modules/.test(i.args));
    const depsStage = stages.find((s) => s.name === /--from=(\S+)/.exec(copiedModules?.args ?? "")?.[1]);
    expect(depsStage, "the final stage copies node_modules from a stage").toBeDefined();
    expect(npmInstalls(depsStage!).every((i) => /--omit=dev/.test(i.args))).toBe(true);
    expect(npmInstalls(finalStage)).toEqual([]);
  });

  it("every package the runtime code imports is a production dependency", () => {
    const missing = new Set<string>();
    for (const dir of buildConfig.include) {
      for (const file of filesUnder(dir).filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts"))) {
        const text = readFileSync(join(repoRoot, file), "utf8");
        for (const m of text.matchAll(/^\s*(import|export)\s+(type\s+)?[^;]*?from\s+"([^"]+)"|import\("([^"]+)"\)/gm)) {
          if (m[2]) continue; // import type: erased
          const spec = m[3] ?? m[4] ?? "";
          if (spec.startsWith(".") || spec.startsWith("node:")) continue;
          const name = spec.startsWith("@") ? spec.split("/").slice(0, 2).join("/") : spec.split("/")[0]!;
          if (!(name in pkg.dependencies)) missing.add(`${name} (imported by ${relative(repoRoot, join(repoRoot, file))})`);
        }
      }
    }
    expect([...missing]).toEqual([]);
  });

  it("runs as a non-root user with tini as init", () => {
    const user = finalStage.instructions.filter((i) => i.op === "USER").at(-1)?.args;
    expect(user, "the final stage sets USER").toBeDefined();
    // Numeric, so the kubelet can enforce runAsNonRoot.
    expect(user).toMatch(/^[1-9]\d*(:\d+)?$/);
    const entrypoint = jsonArray(finalStage.instructions.find((i) => i.op === "ENTRYPOINT")!.args);
    expect(entrypoint[0]).toMatch(/\/tini$/);
    expect(finalStage.instructions.some((i) => i.op === "RUN" && /apt-get install[^&]*\btini\b/.test(i.args))).toBe(true);
  });

  it("its entrypoint is the `trackhook` bin that npm run build emits, with the shebang's Node flags", () => {
    const entrypoint = jsonArray(finalStage.instructions.find((i) => i.op === "ENTRYPOINT")!.args);
    const script = entrypoint.at(-1)!;
    expect(script).toBe(pkg.bin.trackhook);
    // tsconfig.build.json maps <rootDir>/cli/main.ts to <outDir>/cli/main.js.
    const sourcePath = join(buildConfig.compilerOptions.rootDir, relative(buildConfig.compilerOptions.outDir, script).replace(/\.js$/, ".ts"));
    expect(existsSync(join(repoRoot, sourcePath)), `${sourcePath} (the source of ${script})`).toBe(true);
    if (existsSync(join(repoRoot, "dist"))) expect(existsSync(join(repoRoot, script)), `${script} after npm run build`).toBe(true);
    // The final stage copies the build output to where the entrypoint looks for it.
    const workdir = finalStage.instructions.filter((i) => i.op === "WORKDIR").at(-1)?.args;
    const copyDist = finalStage.instructions.find((i) => i.op === "COPY" && /--from=\S+\s+\S*dist\S*\s/.test(i.args));
    expect(copyDist, "the final stage copies dist/").toBeDefined();
    const dest = copyDist!.args.split(/\s+/).at(-1)!;
    expect(join(workdir ?? "/", dest)).toBe(join(workdir ?? "/", buildConfig.compilerOptions.outDir));
    // The build stage emits dist/ where the final stage copies it from.
    const buildStage = stages.find((s) => s.name === /--from=(\S+)/.exec(copyDist!.args)?.[1])!;
    const buildWorkdir = buildStage.instructions.filter((i) => i.op === "WORKDIR").at(-1)?.args ?? "/";
    expect(copyDist!.args.split(/\s+/).at(-2)).toBe(join(buildWorkdir, buildConfig.compilerOptions.outDir));
    expect(buildStage.instructions.some((i) => i.op === "RUN" && /tsc -p tsconfig\.build\.json/.test(i.args))).toBe(true);
    // And what else `npm run build` puts in dist/ (analytics.js, copied by a script).
    for (const step of pkg.scripts.build.match(/node scripts\/\S+\.ts/g) ?? []) {
      expect(buildStage.instructions.some((i) => i.op === "RUN" && i.args.includes(step)), `the build stage runs ${step}, as npm run build does`).toBe(true);
    }
    // dist/*.js are ES modules only because package.json says "type": "module": it must sit above dist/.
    expect(JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")).type).toBe("module");
    expect(finalStage.instructions.some((i) => i.op === "COPY" && !/--from=/.test(i.args) && /^(\S+\s+)*package\.json\s+(\S+\s+)*\.\/?$/.test(i.args))).toBe(true);
    // Node flags in the image equal those of the CLI's shebang (which the image does not use).
    const shebang = readFileSync(join(repoRoot, "cli/main.ts"), "utf8").split("\n")[0]!;
    const shebangFlags = shebang.split(/\s+/).filter((w) => w.startsWith("--"));
    expect(entrypoint.slice(entrypoint.indexOf("node") + 1, -1)).toEqual(shebangFlags);
  });
});
