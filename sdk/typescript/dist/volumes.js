// `Volumes`: a project's persistent named volumes (`/v1/volumes`) — create, list, get, delete.
// A volume is mounted into sandboxes with `CodeSandbox.create({ volumes: [{ name, mountPath,
// readOnly }] })`; its data outlives every sandbox. Wire types are the server's (see
// crates/lizard-proto/src/volume.rs), converted to camelCase at this boundary (convert.ts). Not here: mounting
// (the server does it at create).
import { HttpClient, query, resolveConfig } from './http.js';
import { toVolumeInfo } from './convert.js';
import { InvalidArgumentError, NotFoundError } from './errors.js';
const enc = encodeURIComponent;
/** The wire form of `CodeSandbox.create`'s `volumes` option. */
export function volumeMountsBody(volumes) {
    if (volumes === undefined || volumes === null)
        return undefined;
    if (!Array.isArray(volumes))
        throw new InvalidArgumentError('volumes must be an array of { name, mountPath?, readOnly? }');
    return volumes.map((v) => {
        if (typeof v === 'string' && v)
            return { name: v };
        if (v === null || typeof v !== 'object' || typeof v.name !== 'string' || !v.name) {
            throw new InvalidArgumentError('each volume must be a name or { name, mountPath?, readOnly? }');
        }
        const mount = v;
        const m = { name: mount.name };
        if (mount.mountPath !== undefined)
            m.mount_path = mount.mountPath;
        if (mount.readOnly !== undefined)
            m.read_only = Boolean(mount.readOnly);
        return m;
    });
}
function key(nameOrId) {
    if (typeof nameOrId !== 'string' || !nameOrId)
        throw new InvalidArgumentError('a volume name or id is required');
    return enc(nameOrId);
}
/** Persistent named volumes of a project; their data outlives every sandbox. */
export class Volumes {
    constructor() { }
    static async create(opts) {
        if (opts === null || typeof opts !== 'object' || typeof opts.name !== 'string') {
            throw new InvalidArgumentError('Volumes.create takes { name, sizeLimitBytes?, project? }');
        }
        const body = { name: opts.name };
        if (opts.project !== undefined)
            body.project = opts.project;
        if (opts.sizeLimitBytes !== undefined)
            body.size_limit_bytes = opts.sizeLimitBytes;
        const http = new HttpClient(resolveConfig(opts));
        return toVolumeInfo((await http.json('POST', '/v1/volumes', body)));
    }
    static async list(opts = {}) {
        const http = new HttpClient(resolveConfig(opts));
        const list = (await http.json('GET', `/v1/volumes${query({ project: opts.project })}`));
        return list.map(toVolumeInfo);
    }
    /** By name (in `project` or the key's own) or id (`vol_…`). */
    static async get(nameOrId, opts = {}) {
        const http = new HttpClient(resolveConfig(opts));
        return toVolumeInfo((await http.json('GET', `/v1/volumes/${key(nameOrId)}${query({ project: opts.project })}`)));
    }
    /** `true` if deleted, `false` if it did not exist; throws {@link VolumeInUseError} while mounted unless `force`. */
    static async delete(nameOrId, opts = {}) {
        const http = new HttpClient(resolveConfig(opts));
        try {
            await http.json('DELETE', `/v1/volumes/${key(nameOrId)}${query({ project: opts.project, force: opts.force ? 'true' : undefined })}`);
            return true;
        }
        catch (err) {
            if (err instanceof NotFoundError)
                return false;
            throw err;
        }
    }
}
