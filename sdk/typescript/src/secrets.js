// `Secrets`: a project's secrets (`/v1/projects/{project}/secrets`) — set, list, delete. Secrets
// are write-only: no call returns a value. A sandbox uses them through `network.inject` rules
// (`CodeSandbox.create({ egress, inject: [{ host, headers: { Authorization: 'Bearer
// ${secret:NAME}' } }] })`): the server's egress relay adds the headers on the way out, so the
// values never enter the sandbox. Wire types are the server's (SecretInfo in
// crates/lizard-proto/src/sandbox.rs), converted to camelCase at this boundary (convert.js). Not here: the
// substitution (the server does it).

import { HttpClient, resolveConfig } from './http.js';
import { toSecretInfo } from './convert.js';
import { InvalidArgumentError, NotFoundError } from './errors.js';

const enc = encodeURIComponent;

function required(v, what) {
  if (typeof v !== 'string' || !v) throw new InvalidArgumentError(`${what} must be a non-empty string`);
  return v;
}

function path(project, name) {
  const base = `/v1/projects/${enc(required(project, 'project'))}/secrets`;
  return name === undefined ? base : `${base}/${enc(required(name, 'the secret name'))}`;
}

/**
 * The secrets of a project. An admin key reaches every project's, a project key its own (another
 * project is a `NotFoundError`). Connection settings come from the options (`apiUrl`, `apiKey`)
 * or the environment (`LIZARD_API_URL`, `LIZARD_API_KEY`), as for `CodeSandbox`.
 */
export class Secrets {
  /**
   * Set (create or replace) a secret (`POST /v1/projects/{project}/secrets`). `name` is 1-64
   * letters, digits, `_` or `-`; `value` 1-8192 bytes of visible ASCII or spaces (a bad one is an
   * `InvalidArgumentError` that does not show it). Resolves to its info (no value) with
   * `created: true` if it is new. Running sandboxes that use it get the new value at their next
   * `setNetwork` or start.
   * @param {string} project
   * @param {string} name
   * @param {string} value
   * @param {import('./index.js').ConnectionOptions} [opts]
   */
  static async set(project, name, value, opts = {}) {
    if (typeof value !== 'string') throw new InvalidArgumentError('a secret value must be a string');
    const http = new HttpClient(resolveConfig(opts));
    const { res } = await http.send('POST', path(project), { body: { name: required(name, 'the secret name'), value } });
    return { ...toSecretInfo(await res.json()), created: res.status === 201 };
  }

  /**
   * The project's secrets: names and times, never values (`GET /v1/projects/{project}/secrets`).
   * @param {string} project
   * @param {import('./index.js').ConnectionOptions} [opts]
   */
  static async list(project, opts = {}) {
    const http = new HttpClient(resolveConfig(opts));
    return ((await http.json('GET', path(project))) ?? []).map(toSecretInfo);
  }

  /**
   * Delete a secret: `true` if it was deleted, `false` if the project has none of that name (a
   * project the key cannot see is a `NotFoundError`). Running sandboxes that
   * use it keep its value until their next start or rule change; new ones that name it are
   * refused.
   * @param {string} project
   * @param {string} name
   * @param {import('./index.js').ConnectionOptions} [opts]
   */
  static async delete(project, name, opts = {}) {
    const http = new HttpClient(resolveConfig(opts));
    try {
      await http.json('DELETE', path(project, name));
      return true;
    } catch (err) {
      // The server answers 404 for a project the key cannot see too: that one is not `false`
      // but the list's own `NotFoundError`.
      if (err instanceof NotFoundError) {
        await http.json('GET', path(project));
        return false;
      }
      throw err;
    }
  }
}
