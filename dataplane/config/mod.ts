export { ConfigError } from "./errors.ts";
export { loadDocuments, configFiles, type RawDocument } from "./load.ts";
export { compileConfig, sha256Hex, DEFAULT_NAMESPACE } from "./compile.ts";
export { ConfigHolder, FileConfigProvider, loadConfigFile, staticConfig, type ConfigProvider } from "./provider.ts";
