export { ConfigError } from "./errors.ts";
export { loadDocuments, configFiles, type RawDocument } from "./load.ts";
export { compileConfig, DEFAULT_NAMESPACE, type ConfigPart } from "./compile.ts";
export {
  compileDestination,
  compileSource,
  resolveSourceNames,
  secretValues,
  secretNamesOf,
  sha256Hex,
  writeKeyDigests,
  type CompileResult,
  type Problem,
  RefusedSecret,
  type SecretLookup,
  type SourceRef,
} from "./compile-resource.ts";
export { ConfigHolder, FileConfigProvider, loadConfigFile, staticConfig, type ConfigLoading, type ConfigProvider, type ConfigReload } from "./provider.ts";
export { configMetrics } from "./metrics.ts";
export { configChanges, matchesNoSource } from "./changes.ts";
export { CONFIG_BUCKET, ConfigWriter, KvConfigProvider, destinationKey, ensureConfigBucket, parseConfigKey, sourceKey, type ConfigBucketOptions } from "./kv.ts";
