import type { ConnectionOptions } from './http.js';
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
type MountBody = {
    name: string;
    mount_path?: string;
    read_only?: boolean;
};
/** The wire form of `CodeSandbox.create`'s `volumes` option. */
export declare function volumeMountsBody(volumes: unknown): MountBody[] | undefined;
/** Persistent named volumes of a project; their data outlives every sandbox. */
export declare class Volumes {
    private constructor();
    static create(opts: VolumeCreateOptions): Promise<VolumeInfo>;
    static list(opts?: VolumeListOptions): Promise<VolumeInfo[]>;
    /** By name (in `project` or the key's own) or id (`vol_…`). */
    static get(nameOrId: string, opts?: VolumeListOptions): Promise<VolumeInfo>;
    /** `true` if deleted, `false` if it did not exist; throws {@link VolumeInUseError} while mounted unless `force`. */
    static delete(nameOrId: string, opts?: VolumeDeleteOptions): Promise<boolean>;
}
export {};
