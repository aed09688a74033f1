/**
 * The name a typo probably meant: `slipway.json`'s fields (app-config.ts) and the API's unknown body
 * fields and query parameters (src/http/unknown-fields.ts) suggest one the same way.
 */

/** Edit distance (Levenshtein). */
function distance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length]!;
}

/**
 * The known name nearest to `unknown` (compared in lower case), when it is close relative to its
 * length: 'port' is not a typo of 'start', 'heath_check_path' is one of 'health_check_path'. Names
 * longer than any known one by far are not compared (a hostile 1 MB key costs nothing).
 */
export function nearestName(unknown: string, known: readonly string[]): string | null {
  const word = unknown.toLowerCase();
  let best: { name: string; d: number } | null = null;
  for (const name of known) {
    if (Math.abs(name.length - word.length) > Math.max(1, Math.floor(name.length / 3))) continue;
    const d = distance(word, name);
    if (best === null || d < best.d) best = { name, d };
  }
  return best && best.d <= Math.max(1, Math.floor(best.name.length / 3)) ? best.name : null;
}
