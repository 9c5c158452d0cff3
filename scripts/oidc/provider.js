// A real OpenID Connect provider for the gateway's tests, built on panva's oidc-provider.
// Configured by environment variables (the test fixture sets them):
//   OIDC_PORT            port on 127.0.0.1
//   OIDC_CLIENTS         JSON list of {client_id, client_secret, redirect_uris, post_logout_redirect_uris}
//   OIDC_USERS           JSON object: login name -> {email, name, groups}
// Its dev login form takes any password for a listed login name. It prints one line,
// "listening <issuer>", once it answers.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import Provider from 'oidc-provider';

const port = Number(process.env.OIDC_PORT);
const issuer = `http://127.0.0.1:${port}`;
const users = JSON.parse(process.env.OIDC_USERS ?? '{}');
const clients = JSON.parse(process.env.OIDC_CLIENTS ?? '[]').map((client) => ({
  grant_types: ['authorization_code'],
  response_types: ['code'],
  token_endpoint_auth_method: 'client_secret_basic',
  ...client,
}));

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'test-key', use: 'sig', alg: 'RS256' };

const provider = new Provider(issuer, {
  clients,
  jwks: { keys: [signingKey] },
  cookies: { keys: [randomBytes(32).toString('hex')] },
  pkce: { required: () => true },
  // email, name and groups in the ID token itself, not only at userinfo.
  conformIdTokenClaims: false,
  claims: { openid: ['sub'], email: ['email'], profile: ['name'], groups: ['groups'] },
  scopes: ['openid', 'email', 'profile', 'groups'],
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  async findAccount(_ctx, id) {
    const user = users[id];
    if (!user) return undefined;
    return { accountId: id, claims: async () => ({ sub: id, ...user }) };
  },
  // Consent is implied: every client here is the gateway under test.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId
      || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid email profile groups');
    grant.addOIDCClaims(['email', 'name', 'groups']);
    await grant.save();
    return grant;
  },
});

provider.listen(port, '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});
process.on('SIGTERM', () => process.exit(0));
