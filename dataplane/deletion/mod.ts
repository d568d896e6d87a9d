export {
  deleteMessageId,
  hasEnabledDestination,
  publishDeleteNotifications,
  type DeleteNotification,
  type DeleteNotificationBatch,
} from "./notify.ts";
export { longestRetryMs } from "./late-dead-letters.ts";
