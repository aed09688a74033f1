/**
 * The small page a person's browser shows after the provider sends it back to
 * GET /v2/auth/callback/{provider_id}: that it worked (and they may close the tab), or why not.
 * Every value is escaped; the page loads nothing and sends no referrer (its URL carries the code).
 */
import type { FastifyReply } from 'fastify';
import { statusOf } from '../http/error-statuses.ts';
import type { CallbackOutcome } from '../service/oauth-flow.ts';

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const escapeHtml = (text: string): string => text.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);

export function callbackPage(outcome: CallbackOutcome): string {
  const title = outcome.ok ? 'Authorization complete' : 'Authorization failed';
  const lines = outcome.ok
    ? [
        `Slipway now holds a token from ${outcome.providerName}${outcome.accountLabel ? ` for ${outcome.accountLabel}` : ''}.`,
        outcome.agentId ? `Agent ${outcome.agentId} is connected to it.` : 'You can connect agents to it.',
        'You can close this window.',
      ]
    : [outcome.message, 'Nothing was stored.'];
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)} - Slipway</title>
<style>body{font-family:system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem;color:#222}h1{font-size:1.4rem}</style>
</head><body><h1>${escapeHtml(title)}</h1>
${lines.map((line) => `<p>${escapeHtml(line)}</p>`).join('\n')}
</body></html>
`;
}

export function sendCallbackPage(reply: FastifyReply, outcome: CallbackOutcome): FastifyReply {
  return reply
    .status(outcome.ok ? 200 : statusOf(outcome.code))
    .header('cache-control', 'no-store')
    .header('referrer-policy', 'no-referrer')
    .header('content-security-policy', "default-src 'none'; style-src 'unsafe-inline'")
    .header('x-content-type-options', 'nosniff')
    .type('text/html; charset=utf-8')
    .send(callbackPage(outcome));
}
