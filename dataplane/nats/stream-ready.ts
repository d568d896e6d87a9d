// Whether a stream can take writes now, for /readyz. A stream's info answers from any member of
// a NATS cluster, even one whose stream has no leader (no quorum, or an election under way), when
// every publish fails: info alone said "ready" while ingest answered 503 to everything.
import type { JetStreamManager } from "@nats-io/jetstream";

export interface Readiness {
  ready: boolean;
  reason?: string;
}

export async function streamReadiness(jsm: JetStreamManager, stream: string): Promise<Readiness> {
  try {
    const { cluster } = await jsm.streams.info(stream);
    // Without cluster info (a single server) the answering server is the stream.
    if (cluster && !cluster.leader) return { ready: false, reason: `JetStream stream ${stream} has no leader (a NATS cluster without quorum, or electing one)` };
    return { ready: true };
  } catch (err) {
    return { ready: false, reason: `JetStream stream ${stream} unavailable: ${(err as Error).message}` };
  }
}
