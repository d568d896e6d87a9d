import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", ".tools/", "node_modules/", "coverage/"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/consistent-type-imports": "error",
    },
  },
  {
    // ADR 0001: code outside an area imports the area's mod.ts, its public surface (tests may
    // reach inside). Inside an area, files import each other as ./file.ts.
    // Benchmarks measure parts on their own, as tests do.
    files: ["cli/**/*.ts", "operator/**/*.ts", "dataplane/**/*.ts", "schema/**/*.ts", "scripts/**/*.ts"],
    rules: {
      "no-restricted-imports": ["error", {
        patterns: [{
          regex: "^(\\.\\./)+(dataplane/)?(admin|config|deletion|delivery|ingest|nats|ops|telemetry)/(?!mod\\.ts$)[^/]+$|^(\\.\\./)+(operator|schema)/(?!mod\\.ts$).+$",
          message: "import the area's mod.ts (its public surface, ADR 0001), or add what you need to it",
        }],
      }],
    },
  },
);
