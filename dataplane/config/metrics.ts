// The config's own metrics: a bad edit or bucket entry leaves the previous config in force, which
// nothing else would show (the process runs on, on the old config).
import { Counter, Gauge, type Registry } from "prom-client";
import type { ConfigProvider } from "./provider.ts";

/** `trackhook_config_rejected_total` and `trackhook_config_loaded_timestamp_seconds` on a registry. */
export function configMetrics(registry: Registry, provider: ConfigProvider): void {
  const loading = provider.loading?.bind(provider);
  if (!loading) return; // a static config: nothing is ever reloaded
  new Counter({
    name: "trackhook_config_rejected_total",
    help: "Config reloads (files) or config-bucket entries refused as invalid; the previous config stays in force",
    registers: [registry],
    collect() {
      this.reset();
      this.inc(loading().rejected);
    },
  });
  new Gauge({
    name: "trackhook_config_loaded_timestamp_seconds",
    help: "When the config in force was last read whole and valid",
    registers: [registry],
    collect() {
      this.set(loading().loadedAt / 1000);
    },
  });
}
