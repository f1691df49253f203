import type { ConnectionOptions } from './http.js';
/** A secret as the server reports it: its name and times, never its value. */
export interface SecretInfo {
    project: string;
    name: string;
    createdAt: Date;
    /** When its value was last set. */
    updatedAt: Date;
}
/** What {@link Secrets.set} resolves to. */
export interface SecretSetResult extends SecretInfo {
    /** `true` if the secret is new, `false` if its value was replaced. */
    created: boolean;
}
/** A project's secrets, write-only: no call returns a value. Sandboxes use them through
 * {@link CreateOptions.inject} rules, and the values never enter them. An admin key reaches
 * every project's, a project key its own (another project is a {@link NotFoundError}). */
export declare class Secrets {
    private constructor();
    /** Create or replace a secret. `name`: 1-64 letters, digits, `_` or `-`; `value`: 1-8192 bytes
     * of visible ASCII or spaces (else an {@link InvalidArgumentError}, which does not show it); at
     * most 256 per project ({@link ConflictError}). Running sandboxes get a new value at their
     * next `setNetwork` or start. */
    static set(project: string, name: string, value: string, opts?: ConnectionOptions): Promise<SecretSetResult>;
    /** Names and times, never values. */
    static list(project: string, opts?: ConnectionOptions): Promise<SecretInfo[]>;
    /** `true` if deleted, `false` if the project has no such secret. Running sandboxes keep its
     * value until their next start or rule change. */
    static delete(project: string, name: string, opts?: ConnectionOptions): Promise<boolean>;
}
