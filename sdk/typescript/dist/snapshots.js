// `Snapshots`: saved copies of running sandboxes (`/v1/snapshots`) — list, get, delete. A snapshot
// is taken with `sandbox.createSnapshot()` and new sandboxes start from it with
// `CodeSandbox.create({ snapshot })` (clones: each its own copy of the disk and of the kernels'
// state). Wire types are the server's (see crates/lizard-proto/src/snapshot.rs), converted to
// camelCase at this boundary (convert.ts). Not here: the capture itself (the server does it).
import { HttpClient, query, resolveConfig } from './http.js';
import { toSnapshotInfo } from './convert.js';
import { InvalidArgumentError, NotFoundError } from './errors.js';
const enc = encodeURIComponent;
/** A snapshot given as its id (`snap_…`) or as a {@link SnapshotInfo} object → its id. */
export function snapshotId(snapshot) {
    if (typeof snapshot === 'string' && snapshot)
        return snapshot;
    if (snapshot !== null && typeof snapshot === 'object') {
        const id = snapshot.snapshotId;
        if (typeof id === 'string' && id)
            return id;
    }
    throw new InvalidArgumentError('a snapshot must be a snapshot id (snap_…) or a SnapshotInfo');
}
/** Saved copies of running sandboxes: taken with {@link CodeSandbox.createSnapshot}, started from
 * with `CodeSandbox.create({ snapshot })`. */
export class Snapshots {
    constructor() { }
    static async list(opts = {}) {
        const http = new HttpClient(resolveConfig(opts));
        const list = (await http.json('GET', `/v1/snapshots${query({ sandbox_id: opts.sandboxId, project: opts.project })}`));
        return list.map(toSnapshotInfo);
    }
    /** {@link NotFoundError} if the key cannot see it. */
    static async get(snapshot, opts = {}) {
        const id = snapshotId(snapshot);
        const http = new HttpClient(resolveConfig(opts));
        return toSnapshotInfo((await http.json('GET', `/v1/snapshots/${enc(id)}`)));
    }
    /** `true` if deleted, `false` if it did not exist (or the key cannot see it). Clones keep running. */
    static async delete(snapshot, opts = {}) {
        const id = snapshotId(snapshot);
        const http = new HttpClient(resolveConfig(opts));
        try {
            await http.json('DELETE', `/v1/snapshots/${enc(id)}`);
            return true;
        }
        catch (err) {
            if (err instanceof NotFoundError)
                return false;
            throw err;
        }
    }
}
