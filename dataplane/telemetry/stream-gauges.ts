// How full a JetStream stream is, as two gauges read at scrape time: `<prefix>_bytes` and
// `<prefix>_max_bytes`, labelled with the stream. While the stream cannot be read neither has a
// series: a gauge without labels would say 0, which reads as an empty stream.
import { Counter, Gauge, type Registry } from "prom-client";

export interface StreamUse {
  bytes: number;
  maxBytes: number;
}

export function streamUseGauges(
  registry: Registry,
  options: { prefix: string; stream: string; bytesHelp: string; maxBytesHelp: string; read: () => Promise<StreamUse | undefined> },
): void {
  const { prefix, stream, read } = options;
  const gauge = (name: string, help: string, pick: (use: StreamUse) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ["stream"] as const,
      registers: [registry],
      async collect() {
        this.reset();
        const use = await read();
        if (use) this.set({ stream }, pick(use));
      },
    });
  gauge(`${prefix}_bytes`, options.bytesHelp, (use) => use.bytes);
  gauge(`${prefix}_max_bytes`, options.maxBytesHelp, (use) => use.maxBytes);
}

/**
 * Streams a process found missing and made again: each time, what the stream held is gone
 * (messages not yet delivered, dead letters, history). Logged at error level too, but a loss
 * over within seconds answered ingest's 503s too briefly for any alert on them (found by a
 * disaster-recovery review). Counted by the process that made it (one count per loss).
 */
export function streamsRecreatedCounter(registry: Registry): Counter<"stream"> {
  return new Counter({
    name: "trackhook_stream_recreated_total",
    help: "Streams (and the config bucket's stream) found missing and made again by this process: what each held is gone",
    labelNames: ["stream"] as const,
    registers: [registry],
  });
}
