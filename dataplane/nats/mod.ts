export {
  EVENTS_STREAM, EVENTS_SUBJECTS, REPLAY_SUBJECTS, DLQ_STREAM, DLQ_SUBJECTS, ATTEMPTS_STREAM, ATTEMPTS_SUBJECTS, ATTEMPT_RECORD_SUBJECTS, CONSUMER_PREFIX, DEAD_LETTER_HEADERS,
  eventSubject, eventMsgId, namespaceSubjects, sourceSubjects, sourceOfEventSubject, replaySubject, dlqSubject, parseDlqSubject, attemptsSubject, firstDeliverySubject, consumerName, parseConsumerName,
} from "./subjects.ts";
export { eventsStreamConfig, dlqStreamConfig, attemptsStreamConfig, ensureStream, StreamIsMirrorError, StreamStorageRefusedError, hasMessagesOn, isStreamNotFound, isConsumerNotFound, keptSettings, DEFAULT_SIDE_STREAM, type EventsStreamSettings, type SideStreamSettings, type StreamSettingChange } from "./streams.ts";
export { INBOX_PREFIX, MIN_NATS_SERVER, NatsServerTooOldError, checkServerVersion, compareVersions, connectNats, inboxPrefixOf, isNatsConnected, natsConnectedGauge, natsDisconnectedForMs, natsConnectedWithin, isAuthError, type Component, type ConnectOptions } from "./connect.ts";
export { TurnBatch } from "./turn-batch.ts";
export { msgIdHeader, InvalidMsgIdError } from "./publish-wire.ts";
export { LocalNatsServer, NatsServerNotFoundError, findNatsServer, type LocalNatsServerOptions } from "./local-server.ts";
export { NATS_AUTH_ENV, NatsAuthError, assertNoCredentialsInUrl, natsAuthOptions } from "./auth.ts";
export { streamReadiness, type Readiness } from "./stream-ready.ts";
export { StreamGuard } from "./stream-guard.ts";
export { patiently, isSlowJetStream, START_PATIENCE_MS } from "./api-patience.ts";
export { natsFailureMessage } from "./failures.ts";
export { FETCH_BATCH, INACTIVE_THRESHOLD_MS, followStream, readStored, streamLastSeq } from "./stream-read.ts";
