// Delete notifications: when a deletion request is created, each affected source's webhooks get
// one `{"type":"delete","userId":...,"timestamp":...,"messageId":...,"context":{}}` per user, through the ordinary delivery
// path (stored in TRACKHOOK_EVENTS, retried, dead-lettered like any message).
import { createHash } from "node:crypto";
import type { JetStreamClient } from "@nats-io/jetstream";
import type { CompiledConfig } from "../../schema/mod.ts";
import { eventMsgId, eventSubject } from "../nats/mod.ts";

export interface DeleteNotification {
  type: "delete";
  userId: string;
  timestamp: string;
  messageId: string;
  /**
   * Empty: there is no device or request behind a deletion, but the spec has every call carry a
   * context object, and a receiver reading `body.context.ip` should get undefined, not a TypeError.
   */
  context: Record<string, never>;
}

/**
 * The same request, source and user always give the same messageId, and so the same
 * Nats-Msg-Id: a sender that restarts half-way and sends again is deduplicated by the stream,
 * and receivers can drop a repeat by messageId. The source is part of it because one
 * destination may receive several sources' notifications for the same user.
 */
export function deleteMessageId(requestId: string, source: string, userId: string): string {
  return `delete-${createHash("sha256").update(`${requestId}\0${source}\0${userId}`).digest("hex").slice(0, 32)}`;
}

export interface DeleteNotificationBatch {
  namespace: string;
  source: string;
  /** Stable id of the request (a DeletionRequest's uid). */
  requestId: string;
  userIds: readonly string[];
  /** When the request was made (the same on every attempt). */
  timestamp: string;
  /** Users before this index are already stored (a resumed request). */
  from?: number;
  /** Called after each stored slice with the number of users stored so far. */
  onProgress?: (stored: number) => Promise<void> | void;
}

/** How many publishes are in flight at once; the stream acks each. */
const WINDOW = 64;
const encoder = new TextEncoder();

/** Stores the notifications of one source; resolves with how many were new to the stream. */
export async function publishDeleteNotifications(js: JetStreamClient, batch: DeleteNotificationBatch): Promise<{ stored: number; duplicates: number }> {
  const subject = eventSubject(batch.namespace, batch.source, "delete");
  let stored = 0;
  let duplicates = 0;
  for (let start = batch.from ?? 0; start < batch.userIds.length; start += WINDOW) {
    const slice = batch.userIds.slice(start, start + WINDOW);
    const acks = await Promise.all(
      slice.map((userId) => {
        const notification: DeleteNotification = { type: "delete", userId, timestamp: batch.timestamp, messageId: deleteMessageId(batch.requestId, `${batch.namespace}/${batch.source}`, userId), context: {} };
        return js.publish(subject, encoder.encode(JSON.stringify(notification)), {
          msgID: eventMsgId(batch.namespace, batch.source, notification.messageId),
        });
      }),
    );
    for (const ack of acks) {
      if (ack.duplicate) duplicates++;
      else stored++;
    }
    await batch.onProgress?.(start + slice.length);
  }
  return { stored, duplicates };
}

/** Whether a source has at least one enabled destination, i.e. someone to notify. */
export function hasEnabledDestination(config: CompiledConfig, namespace: string, source: string): boolean {
  return config.destinations.some((d) => d.enabled && d.namespace === namespace && d.sources.includes(source));
}
