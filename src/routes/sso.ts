/**
 * Single sign-on for the dashboard (docs/operations.md, "Single sign-on"; src/sso/sso-service.ts):
 * the sign-in itself (start, the provider's redirect back, who is signed in, logout: no API key, the
 * browser's cookies are the credentials) and what an organization admin manages (the mappings that
 * give people access, the live sessions).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { AppError } from '../errors.ts';
import {
  DateTime,
  ListEnvelope,
  Nullable,
  PageQuery,
  StringEnum,
  Uuid,
  errorResponses,
  pageOf,
  envelope,
} from '../http/schema-helpers.ts';
import { needs } from '../http/route-needs.ts';
import { SignInError } from '../sso/oidc-client.ts';
import { cookieNames, readCookie, setCookie } from '../sso/session-cookie.ts';
import type { SessionCredentials } from '../sso/session-credentials.ts';
import { AmbiguousAccessError, NoAccessError, type SsoService } from '../sso/sso-service.ts';
import type { SessionRow } from '../sso/sso-store.ts';
import { sendSignInPage } from './sso-pages.ts';

/**
 * The state cookie holds the sign-in sealed (src/sso/sso-service.ts): a return path of up to 512
 * characters makes it about 1,000; anything much longer is not one the service set.
 */
const STATE_COOKIE_MAX = 2_048;

const Role = StringEnum(['admin', 'member'] as const);

const Mapping = Type.Object(
  {
    id: Uuid(),
    organization_id: Uuid(),
    kind: StringEnum(['group', 'email_domain'] as const),
    value: Type.String({ description: 'The group as the provider names it, or the e-mail domain (lower case).' }),
    workspace_id: Nullable(Uuid({ description: 'null: every workspace of the organization.' })),
    role: Role,
    created_at: DateTime(),
  },
  { title: 'SsoMapping' },
);

const MappingCreate = Type.Object(
  {
    kind: StringEnum(['group', 'email_domain'] as const, {
      description: "group: a value of the ID token's groups claim; email_domain: the domain of a verified e-mail.",
    }),
    value: Type.String({ minLength: 1, maxLength: 256, pattern: '^\\S(.*\\S)?$' }),
    workspace_id: Nullable(Uuid({ description: 'null: every workspace, as an organization key of the role.' })),
    role: Role,
  },
  { title: 'SsoMappingCreate' },
);

const Person = {
  issuer: Type.String(),
  subject: Type.String({ description: "The provider's stable id of the person (sub)." }),
  email: Nullable(Type.String()),
  name: Nullable(Type.String()),
};

const Session = Type.Object(
  { id: Uuid(), organization_id: Uuid(), ...Person, created_at: DateTime(), expires_at: DateTime() },
  { title: 'SsoSession', description: 'A live sign-in session, without its token.' },
);

const SessionStatus = Type.Object(
  {
    enabled: Type.Boolean({ description: 'Whether single sign-on is set up on this service.' }),
    provider_name: Nullable(Type.String({ description: 'What the sign-in button calls the provider.' })),
    session: Nullable(
      Type.Object({
        ...Session.properties,
        organization_role: Nullable(Role),
        workspaces: Type.Array(Type.Object({ id: Uuid(), name: Type.String(), role: Role }), {
          description: 'The workspaces the person may act in now (X-Tenant-Id), with their role in each.',
        }),
      }),
    ),
  },
  { title: 'SsoStatus' },
);

const Page = (description: string) => ({
  description,
  content: { 'text/html': { schema: Type.String({ description: 'A small page for the browser.' }) } },
});

/** Documented, not validated: whatever the provider sends, the person gets the page. */
const CallbackQuery = Type.Object({
  code: Type.Optional(Type.String({ description: 'The authorization code, when the person was signed in.' })),
  state: Type.Optional(Type.String({ description: 'The state of the sign-in, sent back unchanged.' })),
  error: Type.Optional(Type.String({ description: 'An OAuth error code (access_denied...) instead of a code.' })),
  error_description: Type.Optional(Type.String()),
  iss: Type.Optional(Type.String({ description: 'The issuer (RFC 9207); checked when the provider announces it.' })),
});

const sessionView = (s: SessionRow) => ({
  id: s.id,
  organization_id: s.organization_id,
  issuer: s.issuer,
  subject: s.subject,
  email: s.email,
  name: s.name,
  created_at: s.created_at.toISOString(),
  expires_at: s.expires_at.toISOString(),
});

export interface SsoRouteDeps {
  sso: SsoService;
  sessions: SessionCredentials;
  publicUrl: string;
}

/** The session a browser holds, and the start of a sign-in at the identity provider. */
const signInRoutes: FastifyPluginAsyncTypebox<SsoRouteDeps> = async (app, { sso, sessions, publicUrl }) => {
  const tags = ['sso'];
  const names = cookieNames(publicUrl);

  app.get(
    '/v2/sso/session',
    {
      config: needs({ auth: 'none' }),
      schema: {
        operationId: 'getSsoSession',
        tags,
        summary: 'Whether single sign-on is set up, and who is signed in',
        description: 'No API key: the sign-in cookie, when the browser has one, says who is signed in.',
        response: { 200: SessionStatus },
      },
    },
    async (request, reply) => {
      const found = await sso.describe(sessions.tokenOf(request));
      reply.header('cache-control', 'no-store');
      return {
        enabled: sso.enabled,
        provider_name: sso.providerName,
        session:
          found === null
            ? null
            : {
                ...sessionView(found.session),
                organization_role: found.organizationRole,
                workspaces: found.workspaces,
              },
      };
    },
  );

  app.post(
    '/v2/sso/login',
    {
      config: needs({ auth: 'none' }),
      schema: {
        operationId: 'startSsoSignIn',
        tags,
        summary: 'Start signing in through the identity provider',
        description:
          "Answers the provider's URL to send the browser to, and sets the sign-in's state cookie (HttpOnly, " +
          'ten minutes): the provider sends the browser back to GET /v2/sso/callback, which needs that cookie. ' +
          'A service without single sign-on (SLIPWAY_SSO_ISSUER unset) answers every request 404.',
        body: Type.Object(
          {
            return_to: Type.Optional(
              Type.String({
                maxLength: 512,
                description:
                  "A path of the dashboard to open once signed in; default '/'. Only a path of this origin is followed (one leading /, printable ASCII without spaces): anything else opens '/'.",
              }),
            ),
          },
          { title: 'SsoSignInStart' },
        ),
        response: {
          200: Type.Object({ url: Type.String() }, { title: 'SsoSignInUrl' }),
          ...errorResponses(404, 422, 502),
        },
      },
    },
    async (request, reply) => {
      let started;
      try {
        started = await sso.start(request.body.return_to);
      } catch (error) {
        if (error instanceof SignInError) throw new AppError('bad_gateway', error.message);
        throw error;
      }
      return reply
        .header('cache-control', 'no-store')
        .header('set-cookie', setCookie(names, names.state, started.cookie, started.ttlSeconds))
        .send({ url: started.url });
    },
  );
};

/** The identity provider's return: the sign-in ends with a session, or is refused. */
const callbackRoutes: FastifyPluginAsyncTypebox<SsoRouteDeps> = async (app, { sso, sessions, publicUrl }) => {
  const tags = ['sso'];
  const names = cookieNames(publicUrl);
  const origin = new URL(publicUrl).origin;
  app.get(
    '/v2/sso/callback',
    {
      config: needs({
        auth: 'none',
        swaggerTransform: ({ schema, url }) => ({ schema: { ...schema, querystring: CallbackQuery }, url }),
      }),
      // The query holds the authorization code: keep the request line out of the info-level access log.
      logLevel: 'warn',
      schema: {
        operationId: 'finishSsoSignIn',
        tags,
        summary: "The identity provider's redirect back (browser)",
        description:
          'Checks the state against the cookie of the browser that started the sign-in (once, unexpired), exchanges ' +
          'the code with the PKCE verifier, verifies the ID token with the provider keys, and looks up the ' +
          "person's mappings: signed in, it sets the session cookie and goes on to the dashboard.",
        response: {
          200: Page('Signed in: the session cookie is set; the page goes on to the dashboard.'),
          400: {
            description:
              'Not signed in: the state does not match this browser, was used or expired, or the provider refused (the page); or the request is not valid HTTP (the envelope).',
            content: { ...Page('').content, 'application/json': { schema: Type.Ref('ErrorBody') } },
          },
          403: Page('Signed in at the provider, but no mapping gives this account a workspace.'),
          404: Page('Single sign-on is not set up on this service.'),
          502: Page(
            "The identity provider's answer was not accepted (an ID token not signed by its keys, a wrong nonce) or it could not be reached.",
          ),
          ...errorResponses(422),
        },
      },
    },
    async (request, reply) => {
      // The browser's state cookie has done its work whatever happens next.
      reply.header('set-cookie', setCookie(names, names.state, '', 0));
      if (!sso.enabled)
        return sendSignInPage(reply, {
          kind: 'failed',
          status: 404,
          title: 'Single sign-on is not set up',
          lines: ['This service has no identity provider configured. Sign in with an API key instead.'],
        });
      const query = request.raw.url?.split('?')[1] ?? '';
      try {
        const done = await sso.finish(
          new URL(`${origin}/v2/sso/callback?${query}`),
          readCookie(request, names.state, STATE_COOKIE_MAX),
        );
        // A browser signed in already gets the new session in place of its old one, which ends here.
        const previous = sessions.tokenOf(request);
        if (previous !== null) await sso.logout(previous, 'signed_in_again');
        reply.header('set-cookie', [
          setCookie(names, names.state, '', 0),
          setCookie(names, names.session, done.token, Math.floor(sso.sessionTtlMs / 1000)),
        ]);
        return sendSignInPage(reply, { kind: 'signed_in', who: done.who, returnTo: done.returnTo });
      } catch (error) {
        // Logged for the operator (a provider set up wrongly shows here first); never a code or token.
        if (error instanceof NoAccessError)
          request.log.warn({ email: error.email, groups: error.groups.slice(0, 20) }, 'single sign-on: no mapping');
        else if (error instanceof AmbiguousAccessError)
          request.log.warn(
            { email: error.email, organizations: error.organizationIds },
            'single sign-on: the account is mapped in more than one organization; not signed in',
          );
        else if (error instanceof SignInError)
          request.log.warn({ reason: error.reason, detail: error.message }, 'single sign-on failed');
        if (error instanceof NoAccessError)
          return sendSignInPage(reply, {
            kind: 'failed',
            status: 403,
            title: 'No access to Slipway',
            lines: [
              `The identity provider signed you in as ${error.email ?? 'an account without an e-mail address'}, but no workspace of this service is given to ${error.email === null ? 'it' : 'that account'}${error.groups.length > 0 ? ` or to its groups (${error.groups.slice(0, 20).join(', ')})` : ''}.`,
              'Ask an organization admin of Slipway to map your group or e-mail domain to a workspace, then sign in again.',
            ],
          });
        if (error instanceof AmbiguousAccessError)
          return sendSignInPage(reply, {
            kind: 'failed',
            status: 403,
            title: 'Access given by more than one organization',
            lines: [
              `More than one organization of this service gives access to ${error.email ?? 'this account'} (by its groups or its e-mail domain), so Slipway cannot tell which one to sign you in to, and signs you in to none.`,
              "Ask your organization's admins: a group or an e-mail domain may be mapped in one organization only.",
            ],
          });
        if (error instanceof SignInError)
          return sendSignInPage(reply, {
            kind: 'failed',
            status: error.reason === 'invalid_id_token' || error.reason === 'unreachable' ? 502 : 400,
            title: 'Sign-in failed',
            lines: [error.message, 'You are not signed in.'],
          });
        throw error;
      }
    },
  );
};

/** Sign-out, the group-to-role mappings and the sessions an admin manages. */
const sessionAdminRoutes: FastifyPluginAsyncTypebox<SsoRouteDeps> = async (app, { sso, sessions, publicUrl }) => {
  const tags = ['sso'];
  const names = cookieNames(publicUrl);
  const origin = new URL(publicUrl).origin;
  app.post(
    '/v2/sso/logout',
    {
      config: needs({ auth: 'none' }),
      schema: {
        operationId: 'endSsoSession',
        tags,
        summary: 'Sign out: end the session of the sign-in cookie',
        description:
          'Ends the session server-side and removes the cookie. Without a session it only removes the cookie. ' +
          'Accepted from the dashboard only (Origin), like every change made with the cookie.',
        response: { 204: Type.Null(), ...errorResponses(403) },
      },
    },
    async (request, reply) => {
      const token = sessions.tokenOf(request);
      if (token !== null) {
        if (request.headers.origin !== origin)
          throw new AppError('forbidden', `Sign out from the dashboard's own pages (${origin}).`);
        await sso.logout(token);
      }
      return reply
        .status(204)
        .header('set-cookie', setCookie(names, names.session, '', 0))
        .send(null);
    },
  );

  app.post(
    '/v2/sso/mappings',
    {
      config: needs({ auth: 'organization', admin: 'organization', idempotent: true, etag: true }),
      schema: {
        operationId: 'createSsoMapping',
        tags,
        summary: 'Give a group or an e-mail domain a role in a workspace',
        description:
          'A person whose ID token lists the group, or whose verified e-mail address is in the domain, gets the role ' +
          'in the workspace (workspace_id null: in every workspace of the organization). Several mappings add up; ' +
          'admin wins over member.',
        body: MappingCreate,
        response: { 201: Mapping, ...errorResponses(400, 401, 403, 409, 422) },
      },
    },
    async (request, reply) => {
      const row = await sso.mappings.create(request.caller, request.body);
      return reply.status(201).send({ ...row, created_at: row.created_at.toISOString() });
    },
  );

  app.get(
    '/v2/sso/mappings',
    {
      config: needs({ auth: 'organization', admin: 'organization' }),
      schema: {
        operationId: 'listSsoMappings',
        tags,
        summary: "List the organization's single sign-on mappings",
        querystring: Type.Object(PageQuery),
        response: { 200: ListEnvelope(Mapping, 'A page of mappings.'), ...errorResponses(401, 403, 422) },
      },
    },
    async (request) => {
      const { limit, offset } = pageOf(request.query);
      const rows = await sso.mappings.list(request.caller, { limit, offset });
      return envelope(
        rows.map((r) => ({ ...r, created_at: r.created_at.toISOString() })),
        offset,
      );
    },
  );

  app.delete(
    '/v2/sso/mappings/:mapping_id',
    {
      config: needs({ auth: 'organization', admin: 'organization', ifMatch: 'only-star' }),
      schema: {
        operationId: 'deleteSsoMapping',
        tags,
        summary: 'Delete a mapping (people it let in lose that access at once)',
        params: Type.Object({ mapping_id: Uuid() }),
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request, reply) => {
      await sso.mappings.remove(request.caller, request.params.mapping_id);
      return reply.status(204).send(null);
    },
  );

  app.get(
    '/v2/sso/sessions',
    {
      config: needs({ auth: 'organization', admin: 'organization' }),
      schema: {
        operationId: 'listSsoSessions',
        tags,
        summary: "List the organization's live sign-in sessions",
        querystring: Type.Object(PageQuery),
        response: { 200: ListEnvelope(Session, 'A page of sessions.'), ...errorResponses(401, 403, 422) },
      },
    },
    async (request) => {
      const { limit, offset } = pageOf(request.query);
      return envelope((await sso.sessions.list(request.caller, { limit, offset })).map(sessionView), offset);
    },
  );

  app.delete(
    '/v2/sso/sessions/:session_id',
    {
      config: needs({ auth: 'organization', admin: 'organization', ifMatch: 'only-star' }),
      schema: {
        operationId: 'endSsoSessionById',
        tags,
        summary: 'End a sign-in session (its cookie stops working at once)',
        params: Type.Object({ session_id: Uuid() }),
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request, reply) => {
      await sso.sessions.end(request.caller, request.params.session_id);
      return reply.status(204).send(null);
    },
  );
};

export const ssoRoutes: FastifyPluginAsyncTypebox<SsoRouteDeps> = async (app, opts) => {
  await signInRoutes(app, opts);
  await callbackRoutes(app, opts);
  await sessionAdminRoutes(app, opts);
};
