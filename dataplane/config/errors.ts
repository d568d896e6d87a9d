/** A config document or file that cannot be used; the message names the file, document and field. */
export class ConfigError extends Error {
  readonly code = "TRACKHOOK_CONFIG_INVALID";
  readonly problems: string[];
  constructor(problems: string[]) {
    super(`invalid config:\n  - ${problems.join("\n  - ")}`);
    this.problems = problems;
  }
}
