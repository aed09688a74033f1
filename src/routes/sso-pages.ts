/**
 * The pages a browser shows at the end of a single sign-on (GET /v2/sso/callback): signed in (and on
 * to the dashboard at once), or why not. Every value is escaped; the pages load nothing, run no script
 * and send no referrer (their URL carries the code).
 */
import type { FastifyReply } from 'fastify';

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const escapeHtml = (text: string): string => text.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);

export type SignInPage =
  | { kind: 'signed_in'; who: string; returnTo: string }
  | { kind: 'failed'; status: number; title: string; lines: string[] };

function html(page: SignInPage): string {
  const title = page.kind === 'signed_in' ? 'Signed in' : page.title;
  const head =
    page.kind === 'signed_in'
      ? // A same-site navigation from this page: the new cookie goes with it whatever its SameSite.
        `<meta http-equiv="refresh" content="0; url=${escapeHtml(page.returnTo)}">`
      : '';
  const body =
    page.kind === 'signed_in'
      ? [
          `<p>Signed in as ${escapeHtml(page.who)}.</p>`,
          `<p><a href="${escapeHtml(page.returnTo)}">Continue to the dashboard</a></p>`,
        ]
      : [...page.lines.map((line) => `<p>${escapeHtml(line)}</p>`), '<p><a href="/">Back to the sign-in page</a></p>'];
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
${head}<title>${escapeHtml(title)} - Slipway</title>
<style>body{font-family:system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem;color:#222}h1{font-size:1.4rem}</style>
</head><body><main><h1>${escapeHtml(title)}</h1>
${body.join('\n')}
</main></body></html>
`;
}

export function sendSignInPage(reply: FastifyReply, page: SignInPage): FastifyReply {
  return reply
    .status(page.kind === 'signed_in' ? 200 : page.status)
    .header('cache-control', 'no-store')
    .header('referrer-policy', 'no-referrer')
    .header('content-security-policy', "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
    .header('x-content-type-options', 'nosniff')
    .type('text/html; charset=utf-8')
    .send(html(page));
}
