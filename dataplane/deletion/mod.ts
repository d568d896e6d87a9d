export {
  deleteMessageId,
  hasEnabledDestination,
  publishDeleteNotifications,
  type DeleteNotification,
  type DeleteNotificationBatch,
} from "./notify.ts";
