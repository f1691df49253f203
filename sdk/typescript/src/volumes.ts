// `Volumes`: a project's persistent named volumes (`/v1/volumes`) — create, list, get, delete.
// A volume is mounted into sandboxes with `CodeSandbox.create({ volumes: [{ name, mountPath,
// readOnly }] })`; its data outlives every sandbox. Wire types are the server's (see
// crates/lizard-proto/src/volume.rs), converted to camelCase at this boundary (convert.ts). Not here: mounting
// (the server does it at create).

import { HttpClient, query, resolveConfig } from './http.js';
import type { ConnectionOptions } from './http.js';
import { toVolumeInfo } from './convert.js';
import { InvalidArgumentError, NotFoundError } from './errors.js';
import type { components } from './wire.js';

type W = components['schemas'];

const enc = encodeURIComponent;

// ---- volumes -------------------------------------------------------------------------------------

/** Options of {@link Volumes.create}. */
export interface VolumeCreateOptions extends ConnectionOptions {
  /** Unique in the project: `[a-z0-9][a-z0-9._-]{0,62}`, not starting with `vol_`. */
  name: string;
  /** Capacity (16 MiB to 1 TiB; default 10 GiB). Writes past it fail with ENOSPC in the sandbox. */
  sizeLimitBytes?: number;
  /** Owning project; a project key's own when absent. */
  project?: string;
}

/** Options of {@link Volumes.list} and {@link Volumes.get}. */
export interface VolumeListOptions extends ConnectionOptions {
  project?: string;
}

/** Options of {@link Volumes.delete}. */
export interface VolumeDeleteOptions extends VolumeListOptions {
  /** Kill the sandboxes that mount the volume first (otherwise a mounted volume is refused). */
  force?: boolean;
}

/** A volume as the server reports it. */
export interface VolumeInfo {
  volumeId: string;
  project: string;
  name: string;
  sizeLimitBytes: number;
  /** Bytes in use in the volume's file system. */
  usedBytes: number;
  createdAt: Date;
  /** Running or paused sandboxes that mount it. */
  mountedBy: string[];
}

/** A volume to mount at sandbox create. */
export interface VolumeMount {
  /** The volume's name (or id) in the sandbox's project. */
  name: string;
  /** Absolute path strictly below `/home/user` or `/mnt`, or at/below `/data` or `/workspace`.
   * Default `/home/user/<name>`. */
  mountPath?: string;
  /** Mount read-only (writes fail with EROFS). Default false. */
  readOnly?: boolean;
}

/** A volume mounted in a sandbox, as {@link SandboxInfo} reports it. */
export interface SandboxVolume {
  volumeId: string;
  name: string;
  mountPath: string;
  readOnly: boolean;
}

/** One mount of a create request (`VolumeMountRequest`; the server defaults `read_only`). */
type MountBody = { name: string; mount_path?: string; read_only?: boolean };

/** The wire form of `CodeSandbox.create`'s `volumes` option. */
export function volumeMountsBody(volumes: unknown): MountBody[] | undefined {
  if (volumes === undefined || volumes === null) return undefined;
  if (!Array.isArray(volumes)) throw new InvalidArgumentError('volumes must be an array of { name, mountPath?, readOnly? }');
  return volumes.map((v: unknown) => {
    if (typeof v === 'string' && v) return { name: v };
    if (v === null || typeof v !== 'object' || typeof (v as { name?: unknown }).name !== 'string' || !(v as { name: string }).name) {
      throw new InvalidArgumentError('each volume must be a name or { name, mountPath?, readOnly? }');
    }
    const mount = v as VolumeMount;
    const m: MountBody = { name: mount.name };
    if (mount.mountPath !== undefined) m.mount_path = mount.mountPath;
    if (mount.readOnly !== undefined) m.read_only = Boolean(mount.readOnly);
    return m;
  });
}

function key(nameOrId: unknown): string {
  if (typeof nameOrId !== 'string' || !nameOrId) throw new InvalidArgumentError('a volume name or id is required');
  return enc(nameOrId);
}

/** Persistent named volumes of a project; their data outlives every sandbox. */
export class Volumes {
  private constructor() {}

  static async create(opts: VolumeCreateOptions): Promise<VolumeInfo> {
    if (opts === null || typeof opts !== 'object' || typeof opts.name !== 'string') {
      throw new InvalidArgumentError('Volumes.create takes { name, sizeLimitBytes?, project? }');
    }
    const body: W['CreateVolumeRequest'] = { name: opts.name };
    if (opts.project !== undefined) body.project = opts.project;
    if (opts.sizeLimitBytes !== undefined) body.size_limit_bytes = opts.sizeLimitBytes;
    const http = new HttpClient(resolveConfig(opts));
    return toVolumeInfo((await http.json('POST', '/v1/volumes', body)) as W['VolumeInfo']);
  }

  static async list(opts: VolumeListOptions = {}): Promise<VolumeInfo[]> {
    const http = new HttpClient(resolveConfig(opts));
    const list = (await http.json('GET', `/v1/volumes${query({ project: opts.project })}`)) as W['VolumeInfo'][];
    return list.map(toVolumeInfo);
  }

  /** By name (in `project` or the key's own) or id (`vol_…`). */
  static async get(nameOrId: string, opts: VolumeListOptions = {}): Promise<VolumeInfo> {
    const http = new HttpClient(resolveConfig(opts));
    return toVolumeInfo(
      (await http.json('GET', `/v1/volumes/${key(nameOrId)}${query({ project: opts.project })}`)) as W['VolumeInfo'],
    );
  }

  /** `true` if deleted, `false` if it did not exist; throws {@link VolumeInUseError} while mounted unless `force`. */
  static async delete(nameOrId: string, opts: VolumeDeleteOptions = {}): Promise<boolean> {
    const http = new HttpClient(resolveConfig(opts));
    try {
      await http.json(
        'DELETE',
        `/v1/volumes/${key(nameOrId)}${query({ project: opts.project, force: opts.force ? 'true' : undefined })}`,
      );
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }
}
