// A real OpenID Connect provider for gpupool's tests and demo: panva's certified `oidc-provider`
// with a small configuration (docs/identity.md). Not for production: a centre uses its own IdP.
//
//   node provider.mjs --port 0 --config config.json --accounts accounts.json
//
// config.json: {"clients": [...oidc-provider client metadata], "jwks": {"keys": [private JWKs]},
//               "cookie_keys": ["..."], "id_token_ttl": 3600}
// Client metadata may name a backchannel_logout_uri (Back-Channel Logout 1.0 is on) and the
// refresh_token grant (offline_access, with prompt=consent, gives a refresh token).
// accounts.json, read at every request (so a test can change groups or disable a user):
//   {"alice": {"password": "…", "disabled": false,
//              "claims": {"sub": "…", "preferred_username": "alice", "email": "…", "name": "…",
//                         "unix_name": "alice1", "groups": ["gpu-users"]}}}
//
// The login page is this script's own minimal interaction handler (the package's devInteractions
// accept any password, so they cannot refuse a disabled user): it checks the password and the
// "disabled" flag. Consent is implied for the configured clients (they are the centre's own).
// With --test-hooks, POST /__test/next-id-token makes the next token response carry the given
// ID token instead of the real one: the tests' man in the middle for forged and expired tokens.
// The first line on stdout is the listening URL (the issuer).

import { readFileSync } from 'node:fs';
import http from 'node:http';
import { parseArgs } from 'node:util';

import Provider from 'oidc-provider';

const { values: args } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    host: { type: 'string', default: '127.0.0.1' },
    config: { type: 'string' },
    accounts: { type: 'string' },
    'test-hooks': { type: 'boolean', default: false },
  },
});

const config = JSON.parse(readFileSync(args.config, 'utf8'));
const readAccounts = () => JSON.parse(readFileSync(args.accounts, 'utf8'));

function accountBySub(sub) {
  return Object.values(readAccounts()).find((a) => a.claims.sub === sub && !a.disabled);
}

async function findAccount(ctx, sub) {
  const account = accountBySub(sub);
  if (!account) return undefined; // disabled or deleted: the provider's session no longer signs in
  return { accountId: sub, claims: async () => ({ ...account.claims, sub }) };
}

// The centre's own clients: consent is implied, the grant covers what the client asked for.
async function loadExistingGrant(ctx) {
  const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
  if (grantId) return ctx.oidc.provider.Grant.find(grantId);
  const grant = new ctx.oidc.provider.Grant({
    clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId,
  });
  grant.addOIDCScope(ctx.oidc.params.scope || 'openid');
  await grant.save();
  return grant;
}

const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function loginPage(uid, error = '', login = '') {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Centre sign-in</title></head>
<body><main><h1>Centre sign-in</h1>
${error ? `<p class="error" role="alert">${escape(error)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}/login" autocomplete="off">
<label>Login <input name="login" required value="${escape(login)}"></label>
<label>Password <input type="password" name="password" required></label>
<button type="submit" class="login-submit">Sign in</button>
</form></main></body></html>`;
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk) => { body += chunk; if (body.length > 65536) req.destroy(); });
    req.on('end', () => resolve(new URLSearchParams(body)));
    req.on('error', reject);
  });
}

function send(res, status, html) {
  res.writeHead(status, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-store' });
  res.end(html);
}

const ISSUER_PLACEHOLDER = 'http://127.0.0.1';

// The provider's own requests (back-channel logout tokens) go to the portal, which runs on this
// machine in the tests and the demo: its guard against requests to private addresses (SSRF)
// would refuse 127.0.0.1, and its 2.5 s limit would fail a busy test machine. A centre's IdP
// keeps both; this one is never exposed.
function loopbackFetch(url, options) {
  const { dispatcher, ...rest } = options;
  const host = new URL(url).hostname;
  const local = host === '127.0.0.1' || host === 'localhost';
  return globalThis.fetch(url, local ? { ...rest, signal: AbortSignal.timeout(120000) } : options);
}
let pendingIdToken = null;

// A client asking for offline_access must ask with prompt=consent (OpenID Connect Core §11): the
// consent prompt then comes every time, and is granted at once like the rest (the centre's client).
async function impliedConsent(provider, req, res, details) {
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
  const missing = details.prompt.details;
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  const grantId = await grant.save();
  return provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}

async function interaction(provider, req, res, path) {
  const details = await provider.interactionDetails(req, res);
  const uid = details.uid;
  if (details.prompt.name === 'consent') return impliedConsent(provider, req, res, details);
  if (details.prompt.name !== 'login') return send(res, 501, 'only the login and consent prompts are handled');
  if (req.method === 'GET' && path === `/interaction/${uid}`) return send(res, 200, loginPage(uid));
  if (req.method !== 'POST' || path !== `/interaction/${uid}/login`) return send(res, 404, 'not found');
  const form = await readBody(req);
  const login = form.get('login') || '';
  const account = Object.hasOwn(readAccounts(), login) ? readAccounts()[login] : undefined;
  if (!account || account.password !== form.get('password')) {
    return send(res, 401, loginPage(uid, 'Invalid login or password.', login));
  }
  if (account.disabled) return send(res, 403, loginPage(uid, 'This account is disabled.', login));
  return provider.interactionFinished(req, res, { login: { accountId: account.claims.sub } }, {
    mergeWithLastSubmission: false,
  });
}

async function testHook(req, res) {
  const body = await readBody(req);
  pendingIdToken = body.get('id_token');
  res.writeHead(204);
  res.end();
}

const server = http.createServer();
server.listen(Number(args.port), args.host, () => {
  const issuer = `http://${args.host}:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: config.clients,
    jwks: config.jwks,
    cookies: { keys: config.cookie_keys },
    findAccount,
    loadExistingGrant,
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name', 'preferred_username', 'unix_name'],
      groups: ['groups'],
    },
    pkce: { required: () => true },
    ttl: { IdToken: config.id_token_ttl || 3600 },
    features: {
      devInteractions: { enabled: false },
      rpInitiatedLogout: { enabled: true },
      // OpenID Connect Back-Channel Logout 1.0: a client with backchannel_logout_uri is told,
      // server to server, when a session it is part of ends here.
      backchannelLogout: { enabled: true },
    },
    interactions: { url: (ctx, i) => `/interaction/${i.uid}` },
    fetch: loopbackFetch,
  });
  if (args['test-hooks']) {
    provider.use(async (ctx, next) => {
      await next();
      if (ctx.path === '/token' && ctx.status === 200 && pendingIdToken) {
        ctx.body = { ...ctx.body, id_token: pendingIdToken };
        pendingIdToken = null;
      }
    });
  }
  // Refusals go to stderr with their cause (the tests keep it in provider.log).
  for (const event of ['authorization.error', 'grant.error', 'end_session.error', 'userinfo.error', 'server_error',
    'backchannel.error']) {
    provider.on(event, (ctx, err) => console.error(`${event}: ${err.message}`, err.cause ?? ''));
  }
  const callback = provider.callback();
  server.on('request', (req, res) => {
    const path = new URL(req.url, ISSUER_PLACEHOLDER).pathname;
    if (path.startsWith('/interaction/')) {
      interaction(provider, req, res, path).catch((err) => send(res, 400, loginPage('', err.message)));
    } else if (args['test-hooks'] && req.method === 'POST' && path === '/__test/next-id-token') {
      testHook(req, res);
    } else {
      callback(req, res);
    }
  });
  process.stdout.write(`${issuer}\n`);
});
