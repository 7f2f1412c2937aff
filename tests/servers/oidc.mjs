// A real OpenID Connect provider for the single sign-on tests (SPEC 23.2): panva's
// `oidc-provider` (OpenID certified), pinned in package.json. Its own development login page
// (any password) signs in the accounts of a JSON file, read again at every sign-in so a test
// can change someone's groups between two sign-ins.
//
//   node oidc.mjs PORT CLIENT_ID CLIENT_SECRET REDIRECT_URIS ACCOUNTS_JSON
//
// REDIRECT_URIS: comma-separated (one client for several consoles). An empty CLIENT_SECRET
// registers a public client (PKCE alone). Prints `oidc ready <issuer>` once it listens.
import { readFileSync } from 'node:fs';

import Provider from 'oidc-provider';

const [port, clientId, clientSecret, redirectUris, accountsFile] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;

function accounts() {
  return JSON.parse(readFileSync(accountsFile, 'utf8'));
}

const client = {
  client_id: clientId,
  redirect_uris: redirectUris.split(','),
  grant_types: ['authorization_code'],
  response_types: ['code'],
  ...(clientSecret
    ? { client_secret: clientSecret, token_endpoint_auth_method: 'client_secret_post' }
    : { token_endpoint_auth_method: 'none' }),
};

const provider = new Provider(issuer, {
  clients: [client],
  // The account id typed on the login page is the account's key in the file; its claims are
  // the file's entry (sub is the key).
  async findAccount(ctx, id) {
    const entry = accounts()[id];
    if (!entry) return undefined;
    return { accountId: id, async claims() { return { sub: id, ...entry }; } };
  },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['preferred_username', 'name', 'groups'],
  },
  features: { devInteractions: { enabled: true } },
  pkce: { required: () => true },
  cookies: { keys: ['oidc-test-cookie-key'] },
});
provider.on('server_error', (ctx, err) => console.error('server_error', err));

provider.listen(Number(port), '127.0.0.1', () => {
  console.log(`oidc ready ${issuer}`);
});
