/**
 * The `Warning` headers of the service's answers (RFC 9111 5.5): it names each body field and query
 * parameter of a request that it does not know and ignored, `299 - "unknown field \"secretz\"; did
 * you mean \"secrets\"?"` (the service's docs/api.md, "Conventions").
 */

const WARNING = /(\d{3})\s+\S+\s+"((?:[^"\\]|\\.)*)"/g;

/**
 * The texts of a Warning header's warnings, unescaped. Several headers arrive joined with ", " (as
 * fetch's Headers joins them); a comma inside a quoted text is part of it.
 */
export function parseWarnings(header: string | null | undefined): string[] {
  if (!header) return [];
  return [...header.matchAll(WARNING)].map((match) => match[2]!.replace(/\\(.)/g, '$1'));
}
