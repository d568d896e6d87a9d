// What the admin commands print holds what senders chose (a messageId, an event name, from any
// browser with the public write key). Control and format characters (C0, C1, bidi overrides,
// zero-width) are shown escaped, so that a terminal neither obeys escape sequences in them nor
// reorders the text around them.

const UNPRINTABLE = /[\p{Cc}\p{Cf}]/gu;

/** A table cell: such characters as `\u{…}`. */
export const shownCell = (text: string) => text.replace(UNPRINTABLE, (c) => `\\u{${c.codePointAt(0)!.toString(16)}}`);

/**
 * One JSON line: such characters as JSON `\uXXXX` escapes (JSON.stringify leaves C1 and format
 * characters raw). They occur only inside strings, so the JSON means the same.
 */
export const jsonLine = (value: unknown) =>
  `${JSON.stringify(value).replace(UNPRINTABLE, (c) => [...Array(c.length).keys()].map((i) => `\\u${c.charCodeAt(i).toString(16).padStart(4, "0")}`).join(""))}\n`;
