/** trackhook's version, as in package.json (a test keeps them equal); sent in User-Agent. */
export const VERSION = "0.3.0-dev";
