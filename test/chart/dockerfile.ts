// The Dockerfile read as data (stages and their instructions), for the tests that check it
// without a Docker engine and the one that lays out the image it describes.
export interface Instruction {
  op: string;
  args: string;
  line: number;
}
export interface Stage {
  name?: string;
  from: string;
  instructions: Instruction[];
}

/** Instructions with continuation lines joined and comments dropped. */
export function parseDockerfile(text: string): { globalArgs: Map<string, string>; stages: Stage[] } {
  const instructions: Instruction[] = [];
  let pending = "";
  let start = 0;
  text.split("\n").forEach((raw, i) => {
    const line = raw.trim();
    if (!pending && (line === "" || line.startsWith("#"))) return;
    if (!pending) start = i + 1;
    if (line.endsWith("\\")) {
      pending += line.slice(0, -1) + " ";
      return;
    }
    const full = pending + line;
    pending = "";
    const [op = "", ...rest] = full.split(/\s+/);
    instructions.push({ op: op.toUpperCase(), args: rest.join(" "), line: start });
  });
  const globalArgs = new Map<string, string>();
  const stages: Stage[] = [];
  for (const ins of instructions) {
    if (ins.op === "FROM") {
      const m = /^(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args);
      if (!m?.[1]) throw new Error(`line ${ins.line}: cannot parse FROM ${ins.args}`);
      stages.push({ from: m[1], ...(m[2] ? { name: m[2] } : {}), instructions: [] });
    } else if (stages.length === 0) {
      if (ins.op === "ARG") {
        const [name = "", value = ""] = ins.args.split("=");
        globalArgs.set(name, value);
      }
    } else {
      stages.at(-1)!.instructions.push(ins);
    }
  }
  return { globalArgs, stages };
}
