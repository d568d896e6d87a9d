export { EVENTS_STREAM, EVENTS_SUBJECTS, eventSubject, eventMsgId } from "./subjects.ts";
export { eventsStreamConfig, ensureStream, type EventsStreamSettings } from "./streams.ts";
export { connectNats, type ConnectOptions } from "./connect.ts";
export { LocalNatsServer, NatsServerNotFoundError, findNatsServer, type LocalNatsServerOptions } from "./local-server.ts";
