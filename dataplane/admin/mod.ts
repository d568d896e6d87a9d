// The operations behind the admin commands (`dead-letters`, `replay`, `attempts`, `tail`) and a
// deletion's purge of dead letters, as plain functions over a NATS connection.
export type { DestinationRef } from "./names.ts";
export {
  REPLAY_IN_FLIGHT, ReplayInterruptedError, ReplayTargetError, deadLetterOf, destinationConsumer, purgeDeadLettersOf, readDeadLetters, replayDeadLetters,
  type DeadLetter, type DeadLetterSelection,
} from "./dead-letters.ts";
export { attemptRecordsIn, readAttempts, type AttemptsOptions } from "./attempts.ts";
export { tail, tailFilter, type TailOptions, type TailedMessage } from "./tail.ts";
export { readStatus, type DeliveryStatus, type DestinationStatus, type StatusSelection, type StreamStatus } from "./status.ts";
