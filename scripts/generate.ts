// Writes the files derived from schema/: crds/*.yaml and their copies in charts/trackhook/crds/. Run `npm run generate` after changing
// schema/; test/schema/generated.test.ts fails while a generated file is stale.
import { writeFileSync } from "node:fs";
import { generatedFiles } from "./generated-files.ts";

for (const [path, text] of generatedFiles()) {
  writeFileSync(path, text);
  console.log(`wrote ${path}`);
}
