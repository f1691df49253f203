// `Snapshots`: saved copies of running sandboxes (`/v1/snapshots`) — list, get, delete. A snapshot
// is taken with `sandbox.createSnapshot()` and new sandboxes start from it with
// `CodeSandbox.create({ snapshot })` (clones: each its own copy of the disk and of the kernels'
// state). Wire types are the server's (see crates/lizard-proto/src/snapshot.rs), converted to
// camelCase at this boundary (convert.js). Not here: the capture itself (the server does it).

import { HttpClient, resolveConfig } from './http.js';
import { toSnapshotInfo } from './convert.js';
import { InvalidArgumentError, NotFoundError } from './errors.js';

const enc = encodeURIComponent;

/** A snapshot given as its id (`snap_…`) or as a {@link toSnapshotInfo} object → its id. */
export function snapshotId(snapshot) {
  if (typeof snapshot === 'string' && snapshot) return snapshot;
  if (snapshot !== null && typeof snapshot === 'object' && typeof snapshot.snapshotId === 'string' && snapshot.snapshotId) {
    return snapshot.snapshotId;
  }
  throw new InvalidArgumentError('a snapshot must be a snapshot id (snap_…) or a SnapshotInfo');
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null) q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

/**
 * Snapshots of a project. Connection settings come from the options (`apiUrl`, `apiKey`) or the
 * environment (`LIZARD_API_URL`, `LIZARD_API_KEY`), as for `CodeSandbox`.
 */
export class Snapshots {
  /**
   * The snapshots this key can see (the key's project's; every project's for an admin key unless
   * `project`), optionally only those of one sandbox.
   * @param {import('./index.js').SnapshotListOptions} [opts]
   */
  static async list(opts = {}) {
    const http = new HttpClient(resolveConfig(opts));
    const list = await http.json('GET', `/v1/snapshots${query({ sandbox_id: opts.sandboxId, project: opts.project })}`);
    return list.map(toSnapshotInfo);
  }

  /**
   * One snapshot by id (or a SnapshotInfo); `NotFoundError` if this key cannot see it.
   * @param {string | import('./index.js').SnapshotInfo} snapshot
   * @param {import('./index.js').ConnectionOptions} [opts]
   */
  static async get(snapshot, opts = {}) {
    const id = snapshotId(snapshot);
    const http = new HttpClient(resolveConfig(opts));
    return toSnapshotInfo(await http.json('GET', `/v1/snapshots/${enc(id)}`));
  }

  /**
   * Delete a snapshot (its files; clones made from it keep running). Resolves to `true` if it was
   * deleted, `false` if it did not exist (or this key cannot see it).
   * @param {string | import('./index.js').SnapshotInfo} snapshot
   * @param {import('./index.js').ConnectionOptions} [opts]
   */
  static async delete(snapshot, opts = {}) {
    const id = snapshotId(snapshot);
    const http = new HttpClient(resolveConfig(opts));
    try {
      await http.json('DELETE', `/v1/snapshots/${enc(id)}`);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }
}
