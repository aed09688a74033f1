/** The service's version (package.json's; test/version.test.ts keeps them equal). */
export const SLIPWAY_VERSION = '0.1.0';
