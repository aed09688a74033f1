// Who may call /mcp and /a2a (docs/langgraph.md, "Who may call MCP and A2A").
//
// - A project with its own custom `auth`: that decides, as for the rest of its API (MCP and A2A call the
//   API in process with the caller's headers, protocols.mjs); nothing is added here.
// - Otherwise SLIPWAY_PROTOCOLS_AUTH: `open` (the default: like the rest of the app) or `credential`:
//   every request to /mcp, /a2a/{assistant_id} and the agent card needs `Authorization: Bearer slwp_...`,
//   a protocol credential of this deployment, checked before anything runs. The server asks Slipway
//   (SLIPWAY_API_URL) with its own agent credential (SLIPWAY_AGENT_CREDENTIAL); Slipway says yes only for
//   an unrevoked protocol credential of this very deployment. A yes is kept CHECK_TTL_MS. When Slipway
//   cannot be asked, every request is refused (503): never open by accident.
//
// A refused MCP client learns where to authenticate as the MCP authorization spec says: 401 with
// `WWW-Authenticate: Bearer resource_metadata="..."`, pointing at the protected-resource metadata
// (RFC 9728) this module serves at /.well-known/oauth-protected-resource/mcp (and .../a2a).
import { createHash } from 'node:crypto';
import { origin } from './protocols.mjs';

/** How long a credential Slipway said yes to is taken without asking again (a revocation waits that long). */
const CHECK_TTL_MS = 10_000;
const CHECK_TIMEOUT_MS = 5_000;
const KEPT = 1_000;
const PREFIX = 'slwp_';
const METADATA = '/.well-known/oauth-protected-resource';

/** The protocol a path belongs to (`mcp` or `a2a`), or null. */
function protocolOf(pathname) {
  if (pathname === '/mcp' || pathname === '/mcp/') return 'mcp';
  if (pathname.startsWith('/a2a/') || pathname === '/.well-known/agent-card.json') return 'a2a';
  return null;
}

export function createProtocolAuth({ options, logger, env = process.env, fetchImpl = fetch }) {
  const setting = (env.SLIPWAY_PROTOCOLS_AUTH ?? '').trim().toLowerCase() || 'open';
  if (options.auth?.path) {
    if (setting !== 'open')
      logger.info("MCP and A2A are guarded by the project's custom auth (SLIPWAY_PROTOCOLS_AUTH does not apply)");
    return { mode: 'custom', register() {} };
  }
  if (setting === 'open') return { mode: 'open', register() {} };
  if (setting !== 'credential')
    logger.warn(`SLIPWAY_PROTOCOLS_AUTH=${setting} is neither open nor credential: MCP and A2A require a credential`);
  const apiUrl = (env.SLIPWAY_API_URL ?? '').replace(/\/+$/, '');
  const agentCredential = env.SLIPWAY_AGENT_CREDENTIAL ?? '';
  if (!apiUrl || !agentCredential)
    logger.warn(
      'SLIPWAY_PROTOCOLS_AUTH=credential, but SLIPWAY_API_URL or SLIPWAY_AGENT_CREDENTIAL is not set: MCP and A2A refuse every request',
    );
  const authority = (env.SLIPWAY_PUBLIC_URL ?? '').replace(/\/+$/, '') || apiUrl;
  /** sha256 of a credential Slipway said yes to -> until when it is taken. */
  const valid = new Map();

  /** Whether `credential` is a protocol credential of this deployment; throws when Slipway cannot tell. */
  async function check(credential) {
    const key = createHash('sha256').update(credential).digest('hex');
    const until = valid.get(key);
    if (until !== undefined && until > Date.now()) return true;
    valid.delete(key);
    if (!apiUrl || !agentCredential) throw new Error('SLIPWAY_API_URL or SLIPWAY_AGENT_CREDENTIAL is not set');
    const response = await fetchImpl(`${apiUrl}/v2/auth/protocol-credentials/verify`, {
      method: 'POST',
      headers: { authorization: `Bearer ${agentCredential}`, 'content-type': 'application/json' },
      body: JSON.stringify({ credential }),
      signal: AbortSignal.timeout(CHECK_TIMEOUT_MS),
    });
    if (response.status !== 200) throw new Error(`Slipway answered ${response.status} to the credential check`);
    const { valid: yes } = await response.json();
    if (yes === true) {
      if (valid.size >= KEPT) valid.delete(valid.keys().next().value);
      valid.set(key, Date.now() + CHECK_TTL_MS);
    }
    return yes === true;
  }

  function refusal(request, protocol, status, message, presented) {
    const challenge = [`Bearer resource_metadata="${origin(request)}${METADATA}/${protocol}"`];
    if (presented) challenge.push('error="invalid_token"');
    return Response.json(
      { jsonrpc: '2.0', error: { code: -32001, message }, id: null },
      { status, headers: status === 401 ? { 'www-authenticate': challenge.join(', ') } : {} },
    );
  }

  async function guard(c, next) {
    const request = c.req.raw;
    const protocol = protocolOf(new URL(request.url).pathname);
    if (!protocol) return next();
    const match = /^Bearer\s+(\S{1,512})\s*$/i.exec(request.headers.get('authorization') ?? '');
    const presented = match?.[1];
    if (!presented)
      return refusal(
        request,
        protocol,
        401,
        'Send a protocol credential of this deployment: Authorization: Bearer slwp_...',
      );
    if (!presented.startsWith(PREFIX))
      return refusal(request, protocol, 401, 'Not a protocol credential of this deployment', true);
    let ok;
    try {
      ok = await check(presented);
    } catch (error) {
      logger.warn('Could not check a protocol credential with Slipway', { error: error.message });
      return refusal(request, protocol, 503, 'The credential cannot be checked now; try again later');
    }
    if (!ok) return refusal(request, protocol, 401, 'Not a protocol credential of this deployment', true);
    return next();
  }

  /** The protected-resource metadata (RFC 9728) of /mcp or of the A2A endpoints. */
  function metadata(c) {
    const protocol = c.req.param('protocol');
    if (protocol !== 'mcp' && protocol !== 'a2a') return c.json({ detail: 'Not found' }, 404);
    const base = origin(c.req.raw);
    return c.json(
      {
        resource: `${base}/${protocol}`,
        authorization_servers: authority ? [authority] : [],
        bearer_methods_supported: ['header'],
        resource_name: protocol === 'mcp' ? 'LangGraph deployment (MCP)' : 'LangGraph deployment (A2A)',
        // How to get one: an admin of the workspace mints it (the API's own page of that operation).
        ...(authority ? { resource_documentation: `${authority}/docs#/deployments/createProtocolCredential` } : {}),
      },
      200,
      { 'cache-control': 'public, max-age=300' },
    );
  }

  return {
    mode: 'credential',
    register(app) {
      app.use('/mcp', guard);
      app.use('/a2a/*', guard);
      app.use('/.well-known/agent-card.json', guard);
      app.get(`${METADATA}/:protocol`, metadata);
    },
  };
}
