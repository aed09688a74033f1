/** A page of a list, as services take it (the HTTP query parameters are read in src/http/schema-helpers.ts). */
export interface Page {
  limit: number;
  offset: number;
}
