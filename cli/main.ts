#!/usr/bin/env -S node --max-semi-space-size=16 --no-allocation-site-pretenuring --heap-growing-percent=50
// The `trackhook` command: one binary, one subcommand per component.
//
// The shebang's flags (the image's ENTRYPOINT repeats them; run the file itself, or pass them to node):
// - V8 sizes the young generation from the machine's memory (128 MB on a 24 GB host), which
//   doubled the ingest's RSS for no throughput; 16 MB halves peak RSS and measured equal or better
//   throughput (bench/ingest.ts).
// - V8 decides from sampled survival rates to allocate some object literals straight into the old
//   generation. Under /v1/batch load it did so for objects that live
//   a few milliseconds: the old generation then filled with garbage, ten full GCs ran in 5 s
//   instead of none, and peak RSS was 230-246 MB instead of 145-165 MB. bench/ingest.ts: 13 of
//   18 runs without the flag went that way, none of 9 with it.
// - After a full GC, V8 lets the old generation grow to up to 4x what survived before the next
//   one, sized for a machine's memory rather than a container's. The ingest keeps ~30 MB alive,
//   yet old space grew to 70+ MB of garbage between full GCs whenever JetStream paused: peak RSS
//   197-248 MB. Growing by half at most keeps it at 150-160 MB for a few more, short, full GCs
//   and equal throughput (bench/ingest.ts). It bounds growth without capping the heap, so a burst
//   of large batches still gets the memory it needs.
// An older Node would fail while linking the CLI's imports (an export it lacks), with an unrelated
// SyntaxError before any code runs: the version is checked first, and the CLI loaded after.
const [major = 0, minor = 0] = process.versions.node.split(".").map(Number);
if (major < 22 || (major === 22 && minor < 19)) {
  process.stderr.write(
    `trackhook: needs Node.js 22.19 or newer; this is ${process.version}.\n` +
      "Install Node.js 24 (nodejs.org, or your distribution's nodejs package). In a checkout of trackhook's repository,\n" +
      "`npm run setup` installs it into .tools/bin: export PATH=\"$PWD/.tools/bin:$PATH\"\n",
  );
  process.exit(2);
}
// Name lookups (getaddrinfo) run on libuv's thread pool, 4 threads by default, which file and
// crypto work share: webhook hostnames whose DNS never answers could hold every thread
// (dataplane/delivery/dns-cache.ts). Set before anything uses the pool; a value given wins.
process.env.UV_THREADPOOL_SIZE ??= "32";
await import("./run.ts");
