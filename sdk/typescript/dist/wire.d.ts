export interface paths {
    "/health": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Liveness */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description OK */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/metrics": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Prometheus counters (admin key: all projects; project key: its own) */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Prometheus text */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "text/plain": string;
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/audit": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The audit log: lifecycle calls (sandbox create/kill/pause/resume/hibernate/set-timeout, project create, volume create/delete, E2B create/kill/connect/pause/timeout) and authentication failures, newest first. An admin key sees every event, a project key its own project's. */
        get: {
            parameters: {
                query?: {
                    /** @description Milliseconds since the epoch (inclusive); default 0. */
                    from?: number;
                    /** @description At most this many events (default 1000, at most 10000), newest first. */
                    limit?: number;
                    /** @description Milliseconds since the epoch (exclusive); default now. */
                    to?: number;
                };
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Events, newest first */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["AuditEvent"][];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/openapi.json": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** This document */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description OpenAPI */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/projects": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** List projects */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Names */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": string[];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        /** Create a project and its first API key (admin keys only) */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["CreateProjectRequest"];
                };
            };
            responses: {
                /** @description Created */
                201: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ProjectCreated"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/projects/{project}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** A project's settings (an admin key: any project; a project key: its own) */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    project: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Settings */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ProjectSettings"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        /** Change a project's settings (admin keys only) */
        patch: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    project: string;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["UpdateProjectRequest"];
                };
            };
            responses: {
                /** @description The settings now */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ProjectSettings"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        trace?: never;
    };
    "/v1/projects/{project}/executions": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Per-execution usage: wall ms, CPU ms and peak RSS of each run */
        get: {
            parameters: {
                query?: {
                    /** @description Milliseconds since the epoch (inclusive); default 0. */
                    from?: number;
                    /** @description At most this many runs. */
                    limit?: number;
                    /** @description Only this sandbox's runs. */
                    sandbox?: string;
                    /** @description Milliseconds since the epoch (exclusive); default now. */
                    to?: number;
                };
                header?: never;
                path: {
                    project: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Runs */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ExecutionRow"][];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/projects/{project}/secrets": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** A project's secrets: names and times, never values */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    project: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Secrets */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["SecretInfo"][];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        /**
         * Set (create or replace) a secret of a project
         * @description Secrets are write-only: the answer, like every other, holds the name and times, never the value. Sandboxes use them through network.inject; the value never enters a sandbox. An admin key may set any project's, a project key its own (404 not_found for another project or one that does not exist). 400 invalid_request for a bad name or value; 409 conflict beyond 256 secrets in a project. Running sandboxes that use a replaced secret get the new value at their next PATCH /v1/sandboxes/{id}/network or start.
         */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    project: string;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["SetSecretRequest"];
                };
            };
            responses: {
                /** @description Replaced (its value; created_at_ms kept) */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["SecretInfo"];
                    };
                };
                /** @description Created */
                201: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["SecretInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/projects/{project}/secrets/{name}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /**
         * Delete a secret
         * @description Running sandboxes that use it keep its value until their next start or rule change; there, rules still naming it fail (a PATCH is refused with 400; at a start — resume, server restart — the sandbox's egress cannot be set up): change those rules before deleting a secret they use. New sandboxes naming it are refused (400). 404 not_found if there is no such secret (or the project is not the key's).
         */
        delete: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    name: string;
                    project: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Deleted */
                204: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/projects/{project}/usage": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Usage totals and per-sandbox rows */
        get: {
            parameters: {
                query?: {
                    /** @description Milliseconds since the epoch (inclusive); default 0. */
                    from?: number;
                    /** @description Milliseconds since the epoch (exclusive); default now. */
                    to?: number;
                };
                header?: never;
                path: {
                    project: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Usage */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ProjectUsage"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** List sandboxes */
        get: {
            parameters: {
                query?: {
                    /** @description `k1=v1,k2=v2`: only sandboxes whose metadata has every pair. */
                    metadata?: string;
                    /** @description Admin keys: only this project's sandboxes (a project key always sees its own only). */
                    project?: string;
                    /** @description Only sandboxes in this state: `running`, `paused` or `hibernated`. */
                    state?: "running" | "paused" | "hibernated";
                };
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Sandboxes */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["SandboxInfo"][];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        /** Create a sandbox */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["CreateSandboxRequest"];
                };
            };
            responses: {
                /** @description Created */
                201: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["SandboxInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Get a sandbox */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Sandbox */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["SandboxInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        /** Kill a sandbox */
        delete: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Killed */
                204: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/commands": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Running commands and terminals */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Processes */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ProcessInfo"][];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        /** Run a command. Accept: application/x-ndjson or text/event-stream streams CommandEvents; otherwise the CommandResult when it ends; background: true answers 201 at once. A client disconnect does not stop the command. */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["StartCommandRequest"];
                };
            };
            responses: {
                /** @description Events or result */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["CommandResult"];
                        "application/x-ndjson": components["schemas"]["CommandEvent"];
                        "text/event-stream": components["schemas"]["CommandEvent"];
                    };
                };
                /** @description background: true — started; the process */
                201: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ProcessInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/commands/{pid}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** A process (finished ones, with end, for 60 s) */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    pid: number;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Process */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ProcessInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/commands/{pid}/signal": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Signal the process group (404 once it has exited) */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    pid: number;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["SignalRequest"];
                };
            };
            responses: {
                /** @description Done */
                204: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/commands/{pid}/stdin": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Write to stdin (commands started with stdin: true, or terminals); 409 otherwise or after exit */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    pid: number;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["ProcessInputRequest"];
                };
            };
            responses: {
                /** @description Done */
                204: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/commands/{pid}/stdin/close": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Close stdin (end of file) */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    pid: number;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Done */
                204: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/commands/{pid}/stream": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Reattach: buffered output (last 1 MiB per stream), then live output and end. Without a streaming Accept: wait and return the CommandResult. */
        get: {
            parameters: {
                query?: {
                    /** @description As `StartCommandRequest::base64` (always on for a PTY). */
                    base64?: boolean;
                };
                header?: never;
                path: {
                    id: string;
                    pid: number;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Events or result */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["CommandResult"];
                        "application/x-ndjson": components["schemas"]["CommandEvent"];
                        "text/event-stream": components["schemas"]["CommandEvent"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/contexts": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** List contexts */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Contexts */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["Context"][];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        /** Create a context */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: {
                content: {
                    "application/json": components["schemas"]["CreateContextRequest"];
                };
            };
            responses: {
                /** @description Created */
                201: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["Context"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/contexts/{context_id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Get a context */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    context_id: string;
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Context */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["Context"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        /** Delete a context */
        delete: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    context_id: string;
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Deleted */
                204: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/contexts/{context_id}/fork": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Fork an idle context: a new context whose kernel is a copy-on-write fork of the live kernel (Python, JavaScript, Bash); 409 conflict while a cell runs */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    context_id: string;
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: {
                content: {
                    "application/json": components["schemas"]["ForkContextRequest"];
                };
            };
            responses: {
                /** @description The new context */
                201: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ContextFork"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/contexts/{context_id}/interrupt": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Interrupt the running cell */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    context_id: string;
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Interrupted */
                204: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/contexts/{context_id}/restart": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Restart a context's kernel (state cleared) */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    context_id: string;
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Context */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["Context"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/execute": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Run code. Accept: application/x-ndjson or text/event-stream streams EventFrames; otherwise the aggregated Execution */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["ExecuteRequest"];
                };
            };
            responses: {
                /** @description Execution */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["Execution"];
                        "application/x-ndjson": components["schemas"]["EventFrame"];
                        "text/event-stream": components["schemas"]["EventFrame"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/files": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Read a file (streamed raw bytes) */
        get: {
            parameters: {
                query: {
                    /**
                     * @description Relative paths resolve against the user's home (`/home/user`, or `/root` as `root`);
                     *     normalised; empty or with a NUL byte is a 400.
                     */
                    path: string;
                    /**
                     * @description Act as this user: `user` (the default) or `root` (the sandbox's own root; relative paths
                     *     then resolve against `/root`).
                     */
                    user?: string;
                };
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The bytes */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/octet-stream": string;
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        /** Write a file from the raw request body (streamed, no size limit; parents created; atomic replace through a temporary file) */
        put: {
            parameters: {
                query: {
                    /**
                     * @description Relative paths resolve against the user's home (`/home/user`, or `/root` as `root`);
                     *     normalised; empty or with a NUL byte is a 400.
                     */
                    path: string;
                    /**
                     * @description Act as this user: `user` (the default) or `root` (the sandbox's own root; relative paths
                     *     then resolve against `/root`).
                     */
                    user?: string;
                };
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/octet-stream": string;
                };
            };
            responses: {
                /** @description The written file */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["EntryInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        post?: never;
        /** Remove a file, symlink or directory (recursively) */
        delete: {
            parameters: {
                query: {
                    /**
                     * @description Relative paths resolve against the user's home (`/home/user`, or `/root` as `root`);
                     *     normalised; empty or with a NUL byte is a 400.
                     */
                    path: string;
                    /**
                     * @description Act as this user: `user` (the default) or `root` (the sandbox's own root; relative paths
                     *     then resolve against `/root`).
                     */
                    user?: string;
                };
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Done */
                204: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/files/list": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** List a directory, depth levels deep, sorted by path */
        get: {
            parameters: {
                query: {
                    /** @description How many levels deep (default 1). */
                    depth?: number;
                    /**
                     * @description Relative paths resolve against the user's home (`/home/user`, or `/root` as `root`);
                     *     normalised; empty or with a NUL byte is a 400.
                     */
                    path: string;
                    /**
                     * @description Act as this user: `user` (the default) or `root` (the sandbox's own root; relative paths
                     *     then resolve against `/root`).
                     */
                    user?: string;
                };
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Entries */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["EntryInfo"][];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/files/mkdir": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Create a directory and its parents; 409 conflict when it exists */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["MakeDirRequest"];
                };
            };
            responses: {
                /** @description Created */
                201: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["EntryInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/files/rename": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Move a path (parents of to are created) */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["RenameRequest"];
                };
            };
            responses: {
                /** @description The moved entry */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["EntryInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/files/stat": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Stat a path (symlinks not followed); 404 when it does not exist */
        get: {
            parameters: {
                query: {
                    /**
                     * @description Relative paths resolve against the user's home (`/home/user`, or `/root` as `root`);
                     *     normalised; empty or with a NUL byte is a 400.
                     */
                    path: string;
                    /**
                     * @description Act as this user: `user` (the default) or `root` (the sandbox's own root; relative paths
                     *     then resolve against `/root`).
                     */
                    user?: string;
                };
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Entry */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["EntryInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/files/watch": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Watch a path: NDJSON FsEvents until the client disconnects */
        get: {
            parameters: {
                query: {
                    /**
                     * @description Relative paths resolve against the user's home (`/home/user`, or `/root` as `root`);
                     *     normalised; empty or with a NUL byte is a 400.
                     */
                    path: string;
                    /** @description Also every directory below `path`. */
                    recursive?: boolean;
                };
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Events */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/x-ndjson": components["schemas"]["FsEvent"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/fork": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Fork: a new running sandbox with the source's kernels' state, files, template, limits, env, network and volumes (a snapshot that is not kept). Its own id, host ids, cgroup, network and writable layer. */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: {
                content: {
                    "application/json": components["schemas"]["ForkSandboxRequest"];
                };
            };
            responses: {
                /** @description The new sandbox; `restore` says what each context got back and what was lost */
                201: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["SandboxInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/hibernate": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Hibernate: every context saves its state to disk (per language: variables, functions, classes, imports, cwd...), then the sandbox's processes are stopped; it holds no memory, survives a server restart, and its writable layer is kept. From running or paused; idempotent (no `hibernation` in the answer when it was already hibernated). Code cannot run until it is resumed (409). */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Hibernated; `hibernation` says what each context saved and what it could not */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["SandboxInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/metrics": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * A sandbox's resource use: the usage sampler's samples (CPU in percent of its limit, memory, disk), oldest first
         * @description Samples are taken every --sample-interval-s (default 5 s) and kept for the last hour. Without from and to, before the sampler has two samples, one sample taken now.
         */
        get: {
            parameters: {
                query?: {
                    /** @description Milliseconds since the epoch (inclusive); default: the oldest sample kept. */
                    from?: number;
                    /** @description Milliseconds since the epoch (inclusive); default: now. */
                    to?: number;
                };
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Samples */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["MetricSample"][];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/network": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        /**
         * Replace a sandbox's egress and header injection rules, live
         * @description The sandbox's next connection and DNS query are decided by the new rules (connections already relayed continue). "none" is stored as {"allow": []}. 409 conflict if the sandbox was created without egress (create it with network.egress, even {"allow": []}, to change it later); 403 permission_denied if the rules open anything and the key is a project key of a project without allow_egress; 400 invalid_request naming a bad entry, an inject rule whose host egress does not allow, or a secret that does not exist. Each part given (egress, inject) replaces the sandbox's; an absent part stays as it is.
         */
        patch: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["UpdateNetworkRequest"];
                };
            };
            responses: {
                /** @description Sandbox (its network field has the new rules) */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["SandboxInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        trace?: never;
    };
    "/v1/sandboxes/{id}/network/log": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** A sandbox's traffic through the package registries' mirror and its egress, and its refused requests */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The log */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["NetworkLog"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/pause": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Pause: freeze every process of the sandbox (state kept exactly); its timeout stops counting. Idempotent. */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Paused */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["SandboxInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/ports/{port}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Proxy to a service listening on `port` inside the sandbox (any method; HTTP and WebSocket upgrades). The bearer key stays at the server; other headers and bodies stream through. */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    port: number;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The service's response, or an ErrorBody (503 when nothing answers on the port) */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
            };
        };
        /** Proxy to a service listening on `port` inside the sandbox (any method; HTTP and WebSocket upgrades). The bearer key stays at the server; other headers and bodies stream through. */
        put: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    port: number;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The service's response, or an ErrorBody (503 when nothing answers on the port) */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
            };
        };
        /** Proxy to a service listening on `port` inside the sandbox (any method; HTTP and WebSocket upgrades). The bearer key stays at the server; other headers and bodies stream through. */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    port: number;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The service's response, or an ErrorBody (503 when nothing answers on the port) */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
            };
        };
        /** Proxy to a service listening on `port` inside the sandbox (any method; HTTP and WebSocket upgrades). The bearer key stays at the server; other headers and bodies stream through. */
        delete: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    port: number;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The service's response, or an ErrorBody (503 when nothing answers on the port) */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
            };
        };
        options?: never;
        head?: never;
        /** Proxy to a service listening on `port` inside the sandbox (any method; HTTP and WebSocket upgrades). The bearer key stays at the server; other headers and bodies stream through. */
        patch: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    port: number;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The service's response, or an ErrorBody (503 when nothing answers on the port) */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
            };
        };
        trace?: never;
    };
    "/v1/sandboxes/{id}/ports/{port}/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Proxy to a service listening on `port` inside the sandbox (any method; HTTP and WebSocket upgrades). The bearer key stays at the server; other headers and bodies stream through. */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    port: number;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The service's response, or an ErrorBody (503 when nothing answers on the port) */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
            };
        };
        /** Proxy to a service listening on `port` inside the sandbox (any method; HTTP and WebSocket upgrades). The bearer key stays at the server; other headers and bodies stream through. */
        put: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    port: number;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The service's response, or an ErrorBody (503 when nothing answers on the port) */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
            };
        };
        /** Proxy to a service listening on `port` inside the sandbox (any method; HTTP and WebSocket upgrades). The bearer key stays at the server; other headers and bodies stream through. */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    port: number;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The service's response, or an ErrorBody (503 when nothing answers on the port) */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
            };
        };
        /** Proxy to a service listening on `port` inside the sandbox (any method; HTTP and WebSocket upgrades). The bearer key stays at the server; other headers and bodies stream through. */
        delete: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    port: number;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The service's response, or an ErrorBody (503 when nothing answers on the port) */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
            };
        };
        options?: never;
        head?: never;
        /** Proxy to a service listening on `port` inside the sandbox (any method; HTTP and WebSocket upgrades). The bearer key stays at the server; other headers and bodies stream through. */
        patch: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    port: number;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The service's response, or an ErrorBody (503 when nothing answers on the port) */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
            };
        };
        trace?: never;
    };
    "/v1/sandboxes/{id}/ports/{port}/{rest}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Proxy to a service listening on `port` inside the sandbox (any method; HTTP and WebSocket upgrades). The bearer key stays at the server; other headers and bodies stream through. */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    port: number;
                    rest: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The service's response, or an ErrorBody (503 when nothing answers on the port) */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
            };
        };
        /** Proxy to a service listening on `port` inside the sandbox (any method; HTTP and WebSocket upgrades). The bearer key stays at the server; other headers and bodies stream through. */
        put: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    port: number;
                    rest: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The service's response, or an ErrorBody (503 when nothing answers on the port) */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
            };
        };
        /** Proxy to a service listening on `port` inside the sandbox (any method; HTTP and WebSocket upgrades). The bearer key stays at the server; other headers and bodies stream through. */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    port: number;
                    rest: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The service's response, or an ErrorBody (503 when nothing answers on the port) */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
            };
        };
        /** Proxy to a service listening on `port` inside the sandbox (any method; HTTP and WebSocket upgrades). The bearer key stays at the server; other headers and bodies stream through. */
        delete: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    port: number;
                    rest: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The service's response, or an ErrorBody (503 when nothing answers on the port) */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
            };
        };
        options?: never;
        head?: never;
        /** Proxy to a service listening on `port` inside the sandbox (any method; HTTP and WebSocket upgrades). The bearer key stays at the server; other headers and bodies stream through. */
        patch: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    port: number;
                    rest: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The service's response, or an ErrorBody (503 when nothing answers on the port) */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
            };
        };
        trace?: never;
    };
    "/v1/sandboxes/{id}/pty": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Start a process on a pseudo-terminal; streams like POST /commands (stdout events always carry data_b64) */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["StartPtyRequest"];
                };
            };
            responses: {
                /** @description Events or result */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["CommandResult"];
                        "application/x-ndjson": components["schemas"]["CommandEvent"];
                        "text/event-stream": components["schemas"]["CommandEvent"];
                    };
                };
                /** @description background: true — started; the process */
                201: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ProcessInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/pty/{pid}/input": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Send bytes to the terminal */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    pid: number;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["ProcessInputRequest"];
                };
            };
            responses: {
                /** @description Done */
                204: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/pty/{pid}/resize": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Resize the terminal (the program gets SIGWINCH) */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                    pid: number;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["PtySize"];
                };
            };
            responses: {
                /** @description Done */
                204: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/pty/ws": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** A terminal on a WebSocket (subprotocol lizard.pty.v1; a browser sends its key as a second subprotocol, lizard.key.<key>): binary messages are the terminal's bytes both ways, text messages JSON control (PtyWsServerMessage from the server: start, end, error; PtyWsClientMessage from the client: resize, input, signal). Closing the socket kills the process's group */
        get: {
            parameters: {
                query?: {
                    /** @description A shell command line to run (`bash -c`); an interactive `bash -i` without it. */
                    cmd?: string;
                    /** @description Columns (default 80). */
                    cols?: number;
                    cwd?: string;
                    /** @description Rows (default 24). */
                    rows?: number;
                    /** @description `user` (the default) or `root`, as for commands. */
                    user?: string;
                };
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Switching to the WebSocket protocol (its messages: PtyWsServerMessage, PtyWsClientMessage) */
                101: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/resume": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Resume a paused sandbox (its processes continue), or relaunch a hibernated one with its writable layer and restore its contexts (the answer's `restore` lists per context what was restored and what was lost, with the reason; the timeout starts again). Idempotent. */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Running */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["SandboxInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/snapshots": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Snapshot a running or paused sandbox: its kernels save their state (method `per-language` today; the answer's `method`/`method_reason` say which and why), then its disk image is copied while the sandbox is frozen briefly. The sandbox keeps running (or stays paused). 404 for a sandbox the key cannot see or that was killed; 409 for a hibernated one. */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody?: {
                content: {
                    "application/json": components["schemas"]["CreateSnapshotRequest"];
                };
            };
            responses: {
                /** @description The snapshot; `contexts` says what each context saved and what it could not */
                201: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["SnapshotInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/timeout": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Set the timeout from now */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    id: string;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["SetTimeoutRequest"];
                };
            };
            responses: {
                /** @description Sandbox */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["SandboxInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/snapshots": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Snapshots of the key's project (an admin key: every project's, or `project`'s), oldest first. */
        get: {
            parameters: {
                query?: {
                    /** @description Admin keys: only this project's (all projects' when absent). */
                    project?: string;
                    /** @description Only the snapshots of this sandbox. */
                    sandbox_id?: string;
                };
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Snapshots */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["SnapshotInfo"][];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/snapshots/{snapshot}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** One snapshot (404 for another project's). */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    snapshot: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The snapshot */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["SnapshotInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        /** Delete a snapshot: its files go (clones made from it keep running); its usage stays. 404 for an unknown one or another project's. */
        delete: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    snapshot: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Deleted */
                204: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/templates": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** List templates: the project's own, public ones and the built-ins (an admin key without ?project= lists every project's) */
        get: {
            parameters: {
                query?: {
                    /** @description The project (admin keys; default: the key's own). */
                    project?: string;
                };
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Templates */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["TemplateList"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        /** Build a user template from a Dockerfile inside a build sandbox of its base. With Accept application/x-ndjson or text/event-stream the build's events stream (200); otherwise 202 with the template (state building), or 200 on a cache hit. */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["BuildTemplateRequest"];
                };
            };
            responses: {
                /** @description A cache hit, or the event stream */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["TemplateInfo"];
                        "application/x-ndjson": components["schemas"]["TemplateBuildEvent"];
                        "text/event-stream": components["schemas"]["TemplateBuildEvent"];
                    };
                };
                /** @description The build runs */
                202: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["TemplateInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/templates/{name}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** A template with its state, versions and build log */
        get: {
            parameters: {
                query?: {
                    /** @description The project (admin keys; default: the key's own). */
                    project?: string;
                };
                header?: never;
                path: {
                    name: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The template */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["TemplateInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        /** Delete a user template (sandboxes running on it keep working). 403 for built-ins, 409 template_in_use while another template is built on it. */
        delete: {
            parameters: {
                query?: {
                    /** @description The project (admin keys; default: the key's own). */
                    project?: string;
                };
                header?: never;
                path: {
                    name: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Deleted */
                204: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/volumes": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** List volumes (an admin key without ?project= lists every project's) */
        get: {
            parameters: {
                query?: {
                    /** @description Delete only: kill the sandboxes that mount the volume first. */
                    force?: boolean;
                    /**
                     * @description Project of a volume named by name (default: the key's own; `default` for an admin key).
                     *     Listing with an admin key: only this project's (every project's when absent).
                     */
                    project?: string;
                };
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Volumes */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["VolumeInfo"][];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        /** Create a volume (a sparse ext4 image, mounted on the host) */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["CreateVolumeRequest"];
                };
            };
            responses: {
                /** @description Created */
                201: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["VolumeInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/volumes/{volume}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Get a volume */
        get: {
            parameters: {
                query?: {
                    /** @description Delete only: kill the sandboxes that mount the volume first. */
                    force?: boolean;
                    /**
                     * @description Project of a volume named by name (default: the key's own; `default` for an admin key).
                     *     Listing with an admin key: only this project's (every project's when absent).
                     */
                    project?: string;
                };
                header?: never;
                path: {
                    /** @description Volume id (vol_...) or name. */
                    volume: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Volume */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["VolumeInfo"];
                    };
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        /** Delete a volume and its data. Refused with 409 volume_in_use while a running or paused sandbox mounts it, unless force=true, which kills those sandboxes first. */
        delete: {
            parameters: {
                query?: {
                    /** @description Delete only: kill the sandboxes that mount the volume first. */
                    force?: boolean;
                    /**
                     * @description Project of a volume named by name (default: the key's own; `default` for an admin key).
                     *     Listing with an admin key: only this project's (every project's when absent).
                     */
                    project?: string;
                };
                header?: never;
                path: {
                    /** @description Volume id (vol_...) or name. */
                    volume: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description Deleted */
                204: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content?: never;
                };
                /** @description Error */
                default: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        /** @description One audited call. */
        AuditEvent: {
            /**
             * @description What: `sandbox.create`, `sandbox.kill`, `sandbox.pause`, `sandbox.resume`,
             *     `sandbox.hibernate`, `sandbox.set_timeout`, `project.create`, `volume.create`,
             *     `volume.delete`, `e2b.create`, `e2b.kill`, `e2b.connect`, `e2b.pause`, `e2b.set_timeout`,
             *     `auth.failed`.
             */
            action: string;
            /** @description Who: `admin`, `project` or `anonymous` (no valid credentials). */
            actor: string;
            /**
             * Format: uint64
             * @description When the call finished, milliseconds since the epoch.
             */
            at_ms: number;
            /** @description The client's address (`ip:port` of the TCP peer). */
            client: string;
            /**
             * Format: uint64
             * @description Increasing with time (a cursor for paging).
             */
            id: number;
            /**
             * @description The first characters of the acting key (`lz_1a2b3`), never the key; for E2B sandbox
             *     traffic `sandbox-token`.
             */
            key_prefix?: string | null;
            /**
             * @description Which object (sandbox id, project name, volume id or name; the request path for
             *     `auth.failed`).
             */
            object?: string | null;
            /** @description The acting key's project (`None` for admin keys and anonymous callers). */
            project?: string | null;
            /**
             * Format: uint16
             * @description The HTTP status of the answer.
             */
            status: number;
        };
        /** @description `POST /v1/templates`. */
        BuildTemplateRequest: {
            /** @description Values of the Dockerfile's `ARG`s. */
            build_args?: {
                [key: string]: string;
            };
            /** @description Cancel the build when a streaming client goes away (default: it goes on). */
            cancel_on_disconnect?: boolean;
            /**
             * @description The build context: standard base64 of a tar or tar.gz archive (at most
             *     [`MAX_CONTEXT_BYTES`] decoded), the files `COPY` and `ADD` take.
             */
            context?: string | null;
            /**
             * @description The Dockerfile (the subset in `templates/README.md`). Exactly one of `dockerfile` and
             *     `from_sandbox`.
             */
            dockerfile?: string | null;
            /**
             * @description A template from a running or paused sandbox of the project instead of a Dockerfile: its
             *     files (its writable layer, copied with its processes frozen; nothing of its memory) become
             *     a layer over its template. Answered 201 with the ready template (no stream).
             */
            from_sandbox?: string | null;
            /**
             * @description The template's name: 1-64 of `[A-Za-z0-9._-]`, not starting with `.`; unique in its project;
             *     the built-in templates' names are reserved.
             */
            name: string;
            /** @description The project (admin keys; a project key's own project otherwise). */
            project?: string | null;
            /** @description Every project may use it (admin keys only). */
            public?: boolean;
        };
        /** @description How a process ended. */
        CommandEnd: {
            /**
             * Format: uint64
             * @description From start to exit.
             */
            duration_ms: number;
            /**
             * Format: int32
             * @description The exit status, when the process exited.
             */
            exit_code?: number | null;
            /** @description The signal that killed it (e.g. `SIGKILL`), when one did. */
            signal?: string | null;
            /** @description `timeout_ms` passed and the agent stopped the process group. */
            timed_out?: boolean;
        };
        /** @description One event of a process's output stream (see the module docs). */
        CommandEvent: {
            /** Format: uint64 */
            dropped_stderr_bytes?: number;
            /** Format: uint64 */
            dropped_stdout_bytes?: number;
            /** Format: uint32 */
            pid: number;
            /** @constant */
            type: "start";
        } | {
            data_b64?: string | null;
            text: string;
            /** @constant */
            type: "stdout";
        } | {
            data_b64?: string | null;
            text: string;
            /** @constant */
            type: "stderr";
        } | components["schemas"]["CommandEnd"];
        /**
         * @description A finished process with all its output: what a non-streaming `POST /commands` (or
         *     `GET /commands/{pid}/stream`) returns. A non-zero exit is not an HTTP error.
         */
        CommandResult: {
            /** Format: uint64 */
            dropped_stderr_bytes?: number;
            /**
             * Format: uint64
             * @description Earliest output that had fallen out of the agent's buffer before this reader attached.
             */
            dropped_stdout_bytes?: number;
            /** Format: uint64 */
            duration_ms: number;
            /** Format: int32 */
            exit_code?: number | null;
            /** Format: uint32 */
            pid: number;
            signal?: string | null;
            stderr: string;
            stderr_b64?: string | null;
            /** @description All output as lossy UTF-8. */
            stdout: string;
            /** @description The exact bytes, when `base64` was asked for. */
            stdout_b64?: string | null;
            timed_out?: boolean;
            /** @description Output beyond 64 MiB per stream was left out of this aggregate (stream it instead). */
            truncated?: boolean;
        };
        /** @description A context as the API reports it. */
        Context: {
            cwd: string;
            /**
             * Format: uint64
             * @description Number of cells run by the current kernel (resets when the kernel restarts).
             */
            execution_count: number;
            id: components["schemas"]["ContextId"];
            /** @description `true` for the context a run with only `language` uses. */
            is_default: boolean;
            /**
             * Format: uint64
             * @description How many times the kernel was replaced by a fresh one (explicit restart, crash, or a cell that
             *     ignored an interrupt). Each replacement loses the context's state.
             */
            kernel_restarts: number;
            language: components["schemas"]["Language"];
            /** @description Why the kernel was last replaced, when it was. */
            last_restart_reason?: string | null;
            /** @description The context's limits, when it was created with some. */
            limits?: components["schemas"]["ContextLimits"] | null;
            /**
             * Format: uint64
             * @description Memory charged to the context's own cgroup (its kernel and the kernel's children) right
             *     now, in bytes; absent where contexts have no cgroup of their own (an agent outside a
             *     sandbox, cgroup v2 hosts).
             */
            memory_bytes?: number | null;
            state: components["schemas"]["ContextState"];
        };
        /**
         * @description The answer to a fork (201): the new context, as context creation answers it, plus where it
         *     came from and what of the source's live state it does not have.
         */
        ContextFork: {
            /**
             * @description Why a live fork was made although it loses something (the checkpoint was not possible:
             *     no usable CRIU on the host, or it failed).
             */
            checkpoint_error?: string | null;
            cwd: string;
            /**
             * Format: uint64
             * @description Number of cells run by the current kernel (resets when the kernel restarts).
             */
            execution_count: number;
            /** @description The context that was forked. */
            forked_from: components["schemas"]["ContextId"];
            id: components["schemas"]["ContextId"];
            /** @description `true` for the context a run with only `language` uses. */
            is_default: boolean;
            /**
             * Format: uint64
             * @description How many times the kernel was replaced by a fresh one (explicit restart, crash, or a cell that
             *     ignored an interrupt). Each replacement loses the context's state.
             */
            kernel_restarts: number;
            language: components["schemas"]["Language"];
            /** @description Why the kernel was last replaced, when it was. */
            last_restart_reason?: string | null;
            /** @description The context's limits, when it was created with some. */
            limits?: components["schemas"]["ContextLimits"] | null;
            /**
             * @description What did not come along, with the reason: threads that were running in the source (a fork
             *     keeps only the forking thread), the source's child processes and background jobs, shared
             *     sockets, an asyncio loop's pending tasks. Empty when the copy is complete.
             * @default []
             */
            lost: components["schemas"]["LostItem"][];
            /**
             * Format: uint64
             * @description Memory charged to the context's own cgroup (its kernel and the kernel's children) right
             *     now, in bytes; absent where contexts have no cgroup of their own (an agent outside a
             *     sandbox, cgroup v2 hosts).
             */
            memory_bytes?: number | null;
            /**
             * @description How it was forked.
             * @default live
             */
            method: components["schemas"]["ForkMethod"];
            state: components["schemas"]["ContextState"];
        };
        /** @description The id of a context inside one sandbox. Opaque to clients. */
        ContextId: string;
        /**
         * @description Per-context resource limits (`CreateContextRequest::limits`, `Context::limits`). A context over
         *     its memory limit has its kernel killed (the run ends with `KernelDied`, the context gets a fresh
         *     kernel under the same limits); a CPU limit caps the kernel's CPU time per 100 ms period.
         */
        ContextLimits: {
            /**
             * Format: uint64
             * @description CPU in thousandths of a CPU (1000 = one CPU; at least [`ContextLimits::MIN_CPU_MILLICORES`]).
             */
            cpu_millicores?: number | null;
            /**
             * Format: uint64
             * @description Memory of the kernel and its children, in MiB (at least [`ContextLimits::MIN_MEMORY_MB`]).
             */
            memory_mb?: number | null;
        };
        /** @description What happened to one context's state. */
        ContextReport: {
            id: components["schemas"]["ContextId"];
            language: components["schemas"]["Language"];
            lost: components["schemas"]["LostItem"][];
            /** @description Saved (in a hibernate answer) or restored (in a resume answer). */
            restored: components["schemas"]["StateItem"][];
        };
        /** @description Lifecycle state of a context's kernel. */
        ContextState: "idle" | "busy";
        /** @description `POST /contexts`: create a context (one kernel process). */
        CreateContextRequest: {
            /**
             * @description Working directory of the kernel; the agent's default (`/home/user` in a sandbox) when absent.
             * @default null
             */
            cwd: string | null;
            /**
             * @description Kernel language; Python when absent.
             * @default null
             */
            language: components["schemas"]["Language"] | null;
            /**
             * @description Limits of this context's own cgroup (its kernel and the kernel's children), at most the
             *     sandbox's own. Absent: only the sandbox's limits apply.
             */
            limits?: components["schemas"]["ContextLimits"] | null;
        };
        /** @description `POST /v1/projects` (admin keys only). */
        CreateProjectRequest: {
            /**
             * @description Whether the project's sandboxes may be created with internet egress (default false).
             * @default false
             */
            allow_egress: boolean;
            name: string;
            /**
             * @description Whether the project's sandboxes reach the package registries' mirror (`pip`, `npm`
             *     without egress; default true).
             * @default true
             */
            package_registries: boolean;
        };
        /** @description `POST /v1/sandboxes`. */
        CreateSandboxRequest: {
            /** @description Environment variables of every process in the sandbox. */
            env?: {
                [key: string]: string;
            };
            /** @description Resource limits; server defaults for what is absent. */
            limits?: components["schemas"]["LimitsRequest"] | null;
            /** @description Free-form labels, filterable in `GET /v1/sandboxes`. */
            metadata?: {
                [key: string]: string;
            };
            /** @description Network access; loopback only when absent. Egress needs a project with `allow_egress`. */
            network?: components["schemas"]["NetworkRequest"] | null;
            /**
             * @description What happens when the timeout passes: `kill` (default), `pause` (kept in memory) or
             *     `hibernate` (checkpointed to disk, its memory freed).
             */
            on_timeout?: components["schemas"]["TimeoutAction"] | null;
            /** @description The project that owns the sandbox; a project key's own project when absent. */
            project?: string | null;
            /**
             * @description Start from this snapshot of the project (a clone): its template, limits, environment,
             *     network, volumes, files and kernels' state; only `timeout_ms`, `metadata` and `on_timeout`
             *     may be given with it. The answer's `restore` says what each context got back.
             */
            snapshot_id?: string | null;
            /** @description `code-interpreter-v1` when absent. */
            template?: string | null;
            /**
             * Format: uint64
             * @description Idle lifetime; the sandbox is killed when it passes (300000 when absent).
             */
            timeout_ms?: number | null;
            /** @description Volumes of the project to mount (fixed for the sandbox's life). */
            volumes?: components["schemas"]["VolumeMountRequest"][];
        };
        /** @description `POST /v1/sandboxes/{id}/snapshots` (the body is optional). */
        CreateSnapshotRequest: {
            /** @description Free-form labels of the snapshot (the bounds of a sandbox's metadata). */
            metadata?: {
                [key: string]: string;
            };
        };
        /** @description `POST /v1/volumes`. */
        CreateVolumeRequest: {
            /** @description Unique in the project: `[a-z0-9][a-z0-9._-]{0,62}`, not starting with `vol_`. */
            name: string;
            /** @description The owning project; a project key's own project when absent. */
            project?: string | null;
            /**
             * Format: uint64
             * @description Capacity of the volume's file system; [`DEFAULT_VOLUME_SIZE_BYTES`] when absent.
             */
            size_limit_bytes?: number | null;
        };
        /**
         * @description "none" (default: loopback only), "all" (any public IPv4 address and any name) or rules {"allow": [...], "deny": [...]}. Enforced on the host by name and address at every connection and DNS query; change it on a running sandbox with PATCH /v1/sandboxes/{id}/network.
         * @default none
         */
        Egress: ("none" | "all") | components["schemas"]["EgressRules"];
        /**
         * @description Egress rules. Entries: `example.com` (that name), `*.example.com` (any name below it, not the
         *     name itself), `api.example.com:443`, `1.2.3.4`, `1.2.3.4:8080`, `10.0.0.0/8` (optionally
         *     `:port`), `*` (every public address and name; `*:443`). Deny beats allow; with no `allow` at
         *     all (only `deny`), everything public is allowed but what `deny` names. At most 256 entries.
         *     Names are enforced by name, when the sandbox connects, not by addresses resolved once.
         */
        EgressRules: {
            /** @description Absent: `["*"]` if `deny` is given, nothing otherwise. */
            allow?: string[] | null;
            deny?: string[];
        };
        /** @description A sandbox's traffic through its egress relay. */
        EgressTraffic: {
            /**
             * Format: uint64
             * @description Bytes from upstreams to the sandbox.
             */
            bytes_in: number;
            /**
             * Format: uint64
             * @description Bytes from the sandbox to upstreams.
             */
            bytes_out: number;
            /**
             * Format: uint64
             * @description Connections relayed (upstream reached).
             */
            connections: number;
            /**
             * Format: uint64
             * @description Connections and DNS queries refused.
             */
            refused: number;
        };
        /** @description One filesystem entry (`GET /files/stat`, `GET /files/list`, and the answer to writes). */
        EntryInfo: {
            group: string;
            /**
             * Format: uint32
             * @description Permission bits, e.g. 420 (= 0o644).
             */
            mode: number;
            /**
             * Format: int64
             * @description Last modification, milliseconds since the Unix epoch.
             */
            modified_ms: number;
            /** @description The last path component (`/` for the root). */
            name: string;
            /** @description User and group names (numeric ids when the sandbox's `/etc/passwd`/`/etc/group` has none). */
            owner: string;
            /** @description The normalised absolute path. */
            path: string;
            /** @description `ls -l` style, e.g. `-rw-r--r--` or `drwxr-xr-x`. */
            permissions: string;
            /**
             * Format: uint64
             * @description Bytes (of the link itself for a symlink).
             */
            size: number;
            /** @description Where a symlink points (as written in the link). */
            symlink_target?: string | null;
            type: components["schemas"]["FileType"];
        };
        /** @description The body of every non-2xx response. */
        ErrorBody: {
            code: components["schemas"]["ErrorCode"];
            message: string;
        };
        /**
         * @description Stable, machine-readable error codes. Clients switch on these; messages are for humans.
         *     This list may expand over time.
         */
        ErrorCode: "invalid_request" | "unauthenticated" | "not_found" | "permission_denied" | "conflict" | "volume_in_use" | "template_in_use" | "invalid_dockerfile" | "build_failed" | "payload_too_large" | "unsupported_media_type" | "rate_limited" | "unavailable" | "insufficient_storage" | "unsupported" | "internal";
        /** @description An event with its position in the execution's stream. */
        EventFrame: {
            /** Format: uint64 */
            seq: number;
        } & ({
            context_id: components["schemas"]["ContextId"];
            /** Format: uint64 */
            execution_count: number;
            /** @constant */
            type: "start";
        } | {
            text: string;
            /** @constant */
            type: "stdout";
        } | {
            text: string;
            /** @constant */
            type: "stderr";
        } | components["schemas"]["ExecutionResult"] | components["schemas"]["ExecutionError"] | {
            /** Format: uint64 */
            duration_ms: number;
            status: components["schemas"]["ExecutionStatus"];
            /** @constant */
            type: "end";
            usage?: components["schemas"]["ExecutionUsage"] | null;
        });
        /** @description `POST /execute`. */
        ExecuteRequest: {
            /** @description The cell's source. */
            code: string;
            /** @description Run in this context. Mutually exclusive with `language`. */
            context?: components["schemas"]["ContextId"] | null;
            /** @description Environment variables visible to this run only. */
            env?: {
                [key: string]: string;
            };
            /** @description Run in this language's default context. Mutually exclusive with `context`. Neither: Python. */
            language?: components["schemas"]["Language"] | null;
            /**
             * Format: uint64
             * @description Interrupt the cell after this many milliseconds (the run then ends with a `Timeout` error).
             */
            timeout_ms?: number | null;
        };
        /** @description A whole run, folded from its events: what a non-streaming `POST /execute` returns. */
        Execution: {
            context_id?: components["schemas"]["ContextId"] | null;
            /** Format: uint64 */
            duration_ms: number;
            error?: components["schemas"]["ExecutionError"] | null;
            /** Format: uint64 */
            execution_count: number;
            results: components["schemas"]["ExecutionResult"][];
            /** @description `None` only while the run has not ended. */
            status?: components["schemas"]["ExecutionStatus"] | null;
            stderr: string[];
            /** @description Output chunks in arrival order. */
            stdout: string[];
            usage?: components["schemas"]["ExecutionUsage"] | null;
        };
        /** @description A failed cell. */
        ExecutionError: {
            /** @description Exception class name, e.g. `NameError`, `ReferenceError`, `ExitCode`, `KernelDied`. */
            name: string;
            /** @description The traceback as plain text (no ANSI colour codes). */
            traceback: string;
            /** @description The exception's message. */
            value: string;
        };
        /** @description A rich result of a cell. */
        ExecutionResult: {
            data: {
                [key: string]: unknown;
            };
            is_main_result: boolean;
            metadata?: unknown;
        };
        /** @description One finished run as the server stores it, for `GET /v1/projects/{project}/executions`. */
        ExecutionRow: {
            context_id: string;
            /** Format: uint64 */
            cpu_ms: number;
            /** Format: uint64 */
            finished_at_ms: number;
            language: string;
            /**
             * Format: uint64
             * @description Peak resident memory of the kernel during the run.
             */
            peak_rss_bytes: number;
            sandbox_id: string;
            /**
             * Format: uint64
             * @description Position in the sandbox's execution log.
             */
            seq: number;
            /** @description `ok`, `error`, `interrupted`, `timeout` or `kernel_died`. */
            status: string;
            /** Format: uint64 */
            wall_ms: number;
        };
        /** @description How a run ended. */
        ExecutionStatus: "ok" | "error" | "interrupted" | "timeout" | "kernel_died";
        /** @description Resources one run used, measured on the kernel process and its children. */
        ExecutionUsage: {
            /**
             * Format: uint64
             * @description User + system CPU time of the kernel (and its waited-for children) during the run.
             */
            cpu_ms: number;
            /**
             * Format: uint64
             * @description Peak resident set size of the kernel process during the run.
             */
            peak_rss_bytes: number;
        };
        /** @description What kind of filesystem object an entry is (symlinks are not followed). */
        FileType: ("file" | "dir" | "symlink") | "other";
        /** @description The (optional) body of a fork request. An empty body means all defaults. */
        ForkContextRequest: {
            /**
             * @description `true`: the fork must carry everything (threads, child processes, listening sockets): a
             *     checkpoint of the kernel's process tree when a live fork would lose something, and an error
             *     when that cannot be made. `false`: a live fork only (the fastest; what it loses is in
             *     `lost`). Absent: exact when the server can checkpoint, else live.
             */
            exact?: boolean | null;
            /** @description Limits of the fork's own cgroup; the source context's limits when absent. */
            limits?: components["schemas"]["ContextLimits"] | null;
        };
        /** @description How a context was forked. */
        ForkMethod: "live" | "checkpoint";
        /**
         * @description `POST /v1/sandboxes/{id}/fork` (the body is optional): the new sandbox's own lifetime and
         *     labels; the rest (template, limits, environment, network, volumes) is the source's.
         */
        ForkSandboxRequest: {
            metadata?: {
                [key: string]: string;
            };
            /** Format: uint64 */
            timeout_ms?: number | null;
        };
        /** @description One line of `GET /files/watch` (NDJSON). Clients must ignore types they do not know. */
        FsEvent: {
            is_dir: boolean;
            /** @description `path` relative to the watched directory (empty for the watched path itself). */
            name: string;
            /** @description Absolute path of the affected entry. */
            path: string;
            type: components["schemas"]["FsEventType"];
        };
        /** @description Kinds of [`FsEvent`]. */
        FsEventType: "start" | "create" | "write" | "remove" | "rename" | "chmod";
        /** @description How kernel state was carried across hibernation. */
        HibernationMethod: "per-language" | "criu";
        /** @description The state report of a hibernation or of a resume from one. */
        HibernationReport: {
            contexts: components["schemas"]["ContextReport"][];
            method: components["schemas"]["HibernationMethod"];
            /** @description Why this method: e.g. no checkpoint tool (CRIU >= 4.1) on the host. */
            method_reason: string;
        };
        /**
         * @description One `network.inject` rule: requests to `host` (`api.example.com`, `*.example.com`, optionally
         *     `:port`; without one, 443) get `headers` set (replacing any the sandbox sent with the same
         *     name). A plain-HTTP port sends the secret in clear: name it only for a host on a network you
         *     trust.
         */
        InjectRequest: {
            /** @description Header name → value template, e.g. `{"Authorization": "Bearer ${secret:openai}"}`. */
            headers: {
                [key: string]: string;
            };
            host: string;
        };
        /**
         * @description A kernel language. Serialized as `python`, `javascript` or `bash`; parsed from those and the
         *     aliases `py`, `python3`, `js`, `node`, `typescript`, `ts` (the JavaScript kernel runs
         *     TypeScript with its types stripped), `sh`, `shell` (case-insensitive).
         * @enum {string}
         */
        Language: "python" | "javascript" | "bash";
        /** @description Optional overrides of [`SandboxLimits`]. */
        LimitsRequest: {
            /** Format: uint64 */
            cpu_millicores?: number | null;
            /** Format: uint64 */
            disk_mb?: number | null;
            /** Format: uint64 */
            memory_mb?: number | null;
            /** Format: uint64 */
            pids?: number | null;
            /** Format: uint64 */
            tmp_mb?: number | null;
        };
        /**
         * @description Which stream a build log line came from.
         * @enum {string}
         */
        LogStream: "stdout" | "stderr";
        /** @description One item that did not survive, and why. */
        LostItem: {
            name: string;
            reason: string;
        };
        /**
         * @description `POST /files/mkdir`: create a directory and its missing parents. 201 with the new
         *     [`EntryInfo`]; 409 `conflict` when `path` already exists.
         */
        MakeDirRequest: {
            path: string;
            /**
             * @description Act as this user: `user` (the default) or `root` (the sandbox's own root; relative paths
             *     then resolve against `/root`).
             */
            user?: string | null;
        };
        /** @description One sample of a sandbox's resource use (`GET /v1/sandboxes/{id}/metrics`). */
        MetricSample: {
            /**
             * Format: uint64
             * @description When it was taken, milliseconds since the epoch.
             */
            at_ms: number;
            /**
             * Format: double
             * @description CPU used since the sample before, in percent of the sandbox's CPU limit (0-100).
             */
            cpu_pct: number;
            /**
             * Format: uint64
             * @description Bytes in use on its writable layer, when it has one of its own.
             */
            disk_used_bytes?: number | null;
            /**
             * Format: uint64
             * @description Memory charged to the sandbox (all its processes and its `/tmp`).
             */
            memory_bytes: number;
        };
        /** @description A sandbox's traffic through the package registries' mirror. */
        MirrorTraffic: {
            /**
             * Format: uint64
             * @description Downloads served from the host's cache.
             */
            cache_hits: number;
            /**
             * Format: uint64
             * @description Downloads fetched from a registry.
             */
            cache_misses: number;
            /**
             * Format: uint64
             * @description Requests refused (another destination, registries turned off).
             */
            refused: number;
            /**
             * Format: uint64
             * @description Connections closed at once: it had its budget open.
             */
            rejected_connections: number;
            /**
             * Format: uint64
             * @description Every request, refused ones included.
             */
            requests: number;
            /**
             * Format: uint64
             * @description Body bytes sent to it.
             */
            served_bytes: number;
            /**
             * Format: uint64
             * @description Body bytes fetched from registries for it.
             */
            upstream_bytes: number;
        };
        /**
         * @description `GET /v1/sandboxes/{id}/network/log`: what the sandbox did through the package registries'
         *     mirror and its egress since its processes last started (a create, resume, clone or server
         *     restart begins anew), and the requests refused (the mirror's newest 64, then egress's newest
         *     256, each oldest first).
         */
        NetworkLog: {
            /**
             * @description Its egress (connections relayed by name and address); zero without egress.
             * @default {
             *       "bytes_in": 0,
             *       "bytes_out": 0,
             *       "connections": 0,
             *       "refused": 0
             *     }
             */
            egress: components["schemas"]["EgressTraffic"];
            mirror: components["schemas"]["MirrorTraffic"];
            refused: components["schemas"]["RefusedRequest"][];
            sandbox_id: string;
        };
        /** @description The network of a sandbox: `{"egress": "none" | "all" | {"allow": [...], "deny": [...]}}`. */
        NetworkRequest: {
            /**
             * @description Resume the sandbox when a request reaches it while it is paused or hibernated (its ports,
             *     by path or host name; the agent's routes: execute, contexts, commands, files, pty; E2B's
             *     sandbox traffic), instead of answering that it is paused: E2B's `lifecycle.autoResume`.
             *     Off unless asked.
             */
            auto_resume?: boolean;
            /** @default none */
            egress: components["schemas"]["Egress"];
            /**
             * @description Headers the host adds to the sandbox's HTTP(S) requests to some hosts, with the project's
             *     secrets substituted (`${secret:NAME}`): the values never enter the sandbox. Each host must
             *     be allowed by `egress`. For HTTPS the host terminates TLS for these hosts only, with a
             *     certificate of the sandbox's own CA, which the sandbox trusts. At most 16 rules.
             */
            inject?: components["schemas"]["InjectRequest"][];
            /**
             * @description Let anyone who can reach the server open the sandbox's own ports (a service started
             *     inside, not the agent) by host name, `<port>-<sandbox id>.<sandbox domain>`, without its
             *     access token: E2B's `allowPublicTraffic`. Off unless asked.
             */
            public_ports?: boolean;
        };
        /** @description A process as `GET /commands` and `GET /commands/{pid}` report it. */
        ProcessInfo: {
            /** @description What was executed, e.g. `["/bin/bash", "-c", "echo hi"]`. */
            argv: string[];
            /** @description The shell command line, when started with `cmd`. */
            cmd?: string | null;
            cwd: string;
            /** @description How it ended; absent while it runs. Finished processes stay visible for 60 s. */
            end?: components["schemas"]["CommandEnd"] | null;
            /** @description The request's environment variables (not the inherited ones). */
            env?: {
                [key: string]: string;
            };
            /** Format: uint32 */
            pid: number;
            /** @description The terminal size, for a PTY process. */
            pty?: components["schemas"]["PtySize"] | null;
            /**
             * Format: uint64
             * @description Milliseconds since the Unix epoch.
             */
            started_at_ms: number;
            /** @description Whether it has a stdin pipe (`stdin: true`, or a PTY). */
            stdin: boolean;
            tag?: string | null;
        };
        /**
         * @description `POST /commands/{pid}/stdin` and `POST /pty/{pid}/input`: exactly one of `data` (text, sent as
         *     UTF-8) and `data_b64` (bytes).
         */
        ProcessInputRequest: {
            data?: string | null;
            data_b64?: string | null;
        };
        /** @description A new project and its first key (shown once). */
        ProjectCreated: {
            api_key: string;
            project: string;
        };
        /** @description A project's settings (`GET`/`PATCH /v1/projects/{project}`). */
        ProjectSettings: {
            allow_egress: boolean;
            package_registries: boolean;
            project: string;
        };
        /** @description `GET /v1/projects/{project}/usage?from=&to=` (milliseconds since the epoch). */
        ProjectUsage: {
            /** Format: uint64 */
            from_ms: number;
            project: string;
            sandboxes: components["schemas"]["SandboxUsage"][];
            /**
             * @description Every snapshot the project has had (deleted ones included).
             * @default []
             */
            snapshots: components["schemas"]["SnapshotUsage"][];
            /** Format: uint64 */
            to_ms: number;
            totals: components["schemas"]["UsageTotals"];
            /**
             * @description Every volume the project has had (deleted ones included).
             * @default []
             */
            volumes: components["schemas"]["VolumeUsage"][];
        };
        /** @description A terminal size in character cells. */
        PtySize: {
            /** Format: uint16 */
            cols: number;
            /** Format: uint16 */
            rows: number;
        };
        /** @description A JSON control message a client sends on a terminal's WebSocket (`GET /pty/ws`). */
        PtyWsClientMessage: {
            /** Format: uint16 */
            cols: number;
            /** Format: uint16 */
            rows: number;
            /** @constant */
            type: "resize";
        } | {
            data: string;
            /** @constant */
            type: "input";
        } | {
            signal: string;
            /** @constant */
            type: "signal";
        };
        /** @description A JSON control message the server sends on a terminal's WebSocket (`GET /pty/ws`). */
        PtyWsServerMessage: {
            /** Format: uint32 */
            pid: number;
            /** @constant */
            type: "start";
        } | components["schemas"]["CommandEnd"] | {
            message: string;
            /** @constant */
            type: "error";
        };
        /** @description One refused request. */
        RefusedRequest: {
            /**
             * Format: uint64
             * @description Milliseconds since the epoch.
             */
            at_ms: number;
            /** @description `host:port` or the request target, as the sandbox sent it (at most 256 bytes). */
            destination: string;
            method: string;
            /** @description Why, for egress refusals (`method` `connect` or `dns`). */
            reason?: string | null;
        };
        /**
         * @description `POST /files/rename`: move `from` to `to` (missing parents of `to` are created; an existing file
         *     at `to` is replaced, like `rename(2)`). Answers the moved entry.
         */
        RenameRequest: {
            from: string;
            to: string;
            /**
             * @description Act as this user: `user` (the default) or `root` (the sandbox's own root; relative paths
             *     then resolve against `/root`).
             */
            user?: string | null;
        };
        /** @description A sandbox as the API reports it. */
        SandboxInfo: {
            /** Format: uint64 */
            created_at_ms: number;
            /** @description In the answer of `POST /hibernate`: what each context saved and what it could not. */
            hibernation?: components["schemas"]["HibernationReport"] | null;
            limits: components["schemas"]["SandboxLimits"];
            metadata: {
                [key: string]: string;
            };
            /**
             * @description The network the sandbox was created with.
             * @default {
             *       "egress": "none"
             *     }
             */
            network: components["schemas"]["NetworkRequest"];
            on_timeout: components["schemas"]["TimeoutAction"];
            project: string;
            /** @description In the answer of a resume from hibernation: what each context got back and what was lost. */
            restore?: components["schemas"]["HibernationReport"] | null;
            sandbox_id: string;
            state: components["schemas"]["SandboxState"];
            template: string;
            /**
             * Format: uint64
             * @description When the server kills the sandbox unless its timeout is extended.
             */
            timeout_at_ms: number;
            /**
             * @description Mounted volumes.
             * @default []
             */
            volumes: components["schemas"]["SandboxVolume"][];
        };
        /** @description Resource limits of one sandbox. */
        SandboxLimits: {
            /**
             * Format: uint64
             * @description CPU time per wall second, in thousandths of a core (1000 = one core).
             */
            cpu_millicores: number;
            /**
             * Format: uint64
             * @description Size of the writable layer (everything written outside `/tmp` and `/dev/shm`), in MiB.
             *     Sparse: only what is written uses host disk.
             * @default 1024
             */
            disk_mb: number;
            /**
             * Format: uint64
             * @description Memory of all processes (including `/tmp`, a tmpfs), in MiB.
             */
            memory_mb: number;
            /**
             * Format: uint64
             * @description Processes and threads.
             */
            pids: number;
            /**
             * Format: uint64
             * @description Size of the `/tmp` tmpfs, in MiB.
             */
            tmp_mb: number;
        };
        /** @description A sandbox's lifecycle state. */
        SandboxState: ("running" | "paused" | "killed") | "hibernated";
        /** @description One sandbox's usage. */
        SandboxUsage: {
            /** Format: double */
            cpu_seconds: number;
            /**
             * Format: uint64
             * @default 0
             */
            egress_bytes_in: number;
            /**
             * Format: uint64
             * @description Bytes its egress carried out of it and into it, and its connections and DNS queries
             *     refused.
             * @default 0
             */
            egress_bytes_out: number;
            /**
             * Format: uint64
             * @default 0
             */
            egress_refused: number;
            /** Format: double */
            execution_cpu_seconds: number;
            /** Format: double */
            execution_wall_seconds: number;
            /** Format: uint64 */
            executions: number;
            /**
             * Format: double
             * @description Time spent hibernated (on disk, no processes), metered apart from paused time.
             * @default 0
             */
            hibernated_seconds: number;
            /** Format: uint64 */
            max_execution_peak_rss_bytes: number;
            /** Format: double */
            memory_gib_seconds: number;
            /**
             * Format: uint64
             * @description Body bytes the package registries' mirror sent to it, and its requests to the mirror.
             * @default 0
             */
            mirror_bytes: number;
            /**
             * Format: uint64
             * @default 0
             */
            mirror_requests: number;
            /** Format: double */
            paused_seconds: number;
            /** Format: double */
            running_seconds: number;
            sandbox_id: string;
        };
        /** @description A volume mounted in a sandbox, as [`crate::SandboxInfo`] reports it. */
        SandboxVolume: {
            mount_path: string;
            name: string;
            read_only: boolean;
            volume_id: string;
        };
        /** @description A secret as the API shows it: its name and times, never its value. */
        SecretInfo: {
            /** Format: uint64 */
            created_at_ms: number;
            name: string;
            project: string;
            /** Format: uint64 */
            updated_at_ms: number;
        };
        /** @description `POST /v1/projects/{project}/secrets`: set (create or replace) a secret. Never read back. */
        SetSecretRequest: {
            /** @description 1-64 letters, digits, `_` or `-`. */
            name: string;
            /** @description 1-8192 bytes of visible ASCII or spaces (it is sent as, or in, an HTTP header value). */
            value: string;
        };
        /** @description `POST /v1/sandboxes/{id}/timeout`. */
        SetTimeoutRequest: {
            /**
             * Format: uint64
             * @description New lifetime from now.
             */
            timeout_ms: number;
        };
        /**
         * @description `POST /commands/{pid}/signal`: `signal` is a name such as `SIGTERM`, `SIGKILL`, `SIGINT`,
         *     `SIGHUP`, `SIGUSR1` (the `SIG` prefix is optional). It goes to the process's whole group.
         */
        SignalRequest: {
            signal: string;
        };
        /** @description A snapshot as the API reports it. */
        SnapshotInfo: {
            /** @description Per context: what was saved (`restored`) and what could not be (`lost`). */
            contexts: components["schemas"]["ContextReport"][];
            /** Format: uint64 */
            created_at_ms: number;
            /**
             * Format: uint64
             * @description How long the source sandbox's processes were frozen for it (the memory dump and the disk
             *     copy), in milliseconds; absent for snapshots of older servers.
             */
            frozen_ms?: number | null;
            /** @description The source's limits, which every clone gets (its disk is a copy of the source's). */
            limits: components["schemas"]["SandboxLimits"];
            /** @default {} */
            metadata: {
                [key: string]: string;
            };
            /** @description How the memory state was captured. */
            method: components["schemas"]["HibernationMethod"];
            /** @description Why this method (what the host offers). */
            method_reason: string;
            project: string;
            /** @description The sandbox it was taken of (it may be gone since). */
            sandbox_id: string;
            /**
             * Format: uint64
             * @description Host disk the snapshot holds (its copy of the writable layer's image, saved state
             *     included).
             */
            size_bytes: number;
            /** @description `snap_` + 20 characters. */
            snapshot_id: string;
            template: string;
        };
        /** @description One snapshot's storage in a project's usage. */
        SnapshotUsage: {
            /** @description Deleted snapshots keep their usage. */
            deleted: boolean;
            /**
             * Format: double
             * @description `size_bytes` × the time it existed (until now, or its deletion), GiB-hours.
             */
            gib_hours: number;
            sandbox_id: string;
            /** Format: uint64 */
            size_bytes: number;
            snapshot_id: string;
        };
        /** @description `POST /commands`: start a process. Exactly one of `cmd` and `argv`. */
        StartCommandRequest: {
            /** @description A program and its arguments, run directly (no shell); `argv[0]` is looked up in `PATH`. */
            argv?: string[] | null;
            /** @description Return at once with the process's [`ProcessInfo`] (201) instead of streaming or waiting. */
            background?: boolean;
            /**
             * @description Also send each output chunk's raw bytes as `data_b64` (and `stdout_b64`/`stderr_b64` in the
             *     aggregated result), so arbitrary bytes survive.
             */
            base64?: boolean;
            /** @description A shell command line, run as `bash -c CMD` (no login shell: the sandbox's `PATH` stays). */
            cmd?: string | null;
            /**
             * @description Working directory (default: the user's home); relative paths resolve against the user's
             *     home (`/home/user`, or `/root` for `user: "root"`).
             */
            cwd?: string | null;
            /** @description Environment variables, merged over the sandbox's. */
            env?: {
                [key: string]: string;
            };
            /** @description Keep a stdin pipe open for `POST /commands/{pid}/stdin`; otherwise stdin is `/dev/null`. */
            stdin?: boolean;
            /** @description A free-form label shown by `GET /commands`. */
            tag?: string | null;
            /**
             * Format: uint64
             * @description Stop the process group after this many milliseconds (SIGTERM, then SIGKILL after 2 s); the
             *     `end` event then says `timed_out`. No limit when absent.
             */
            timeout_ms?: number | null;
            /**
             * @description The user to run as: `user` (the sandbox user, the default) or `root` (the sandbox's own
             *     root: uid 0 of the sandbox's user namespace with the agent's kept capabilities, `HOME` and
             *     default cwd `/root`, umask 022); anything else is a 400.
             */
            user?: string | null;
        };
        /**
         * @description `POST /pty`: start a process on a new pseudo-terminal. At most one of `cmd` and `argv`; neither
         *     runs an interactive `bash -i`.
         */
        StartPtyRequest: {
            argv?: string[] | null;
            /** @description Return at once with the [`ProcessInfo`] (201); attach with `GET /commands/{pid}/stream`. */
            background?: boolean;
            cmd?: string | null;
            /** Format: uint16 */
            cols: number;
            cwd?: string | null;
            /** @description Merged over the sandbox's environment; `TERM` defaults to `xterm-256color`. */
            env?: {
                [key: string]: string;
            };
            /** Format: uint16 */
            rows: number;
            tag?: string | null;
            /** Format: uint64 */
            timeout_ms?: number | null;
            user?: string | null;
        };
        /** @description One item of a context's state that was saved or restored. */
        StateItem: {
            /**
             * @description `variable`, `function`, `class`, `module`, `alias`, `cwd`, `env`, `execution_count`, or
             *     `process` (the whole kernel process, restored by CRIU).
             */
            kind: string;
            /** @description Variable, function, class, module alias or alias name; the path for `cwd`. */
            name: string;
        };
        /** @description One event of a streamed build. */
        TemplateBuildEvent: {
            /** Format: uint */
            index: number;
            name: string;
            /** Format: uint */
            total: number;
            /** @constant */
            type: "step";
        } | {
            stream: components["schemas"]["LogStream"];
            text: string;
            /** @constant */
            type: "log";
        } | {
            template: components["schemas"]["TemplateInfo"];
            /** @constant */
            type: "done";
        } | {
            error: components["schemas"]["ErrorBody"];
            /** @constant */
            type: "error";
        };
        /** @description `GET /v1/templates/{name}`. */
        TemplateInfo: {
            /** @description The template it is a layer over (`None` for built-ins). */
            base?: string | null;
            /** @description The last build's log (its end, at most 64 KiB; not in lists). */
            build_log?: string;
            /** @description A built-in template (`code-interpreter-v1`): it cannot be deleted. */
            builtin: boolean;
            /**
             * Format: uint64
             * @description Milliseconds since the Unix epoch.
             */
            created_at: number;
            /** @description Why the last build failed. */
            error?: components["schemas"]["ErrorBody"] | null;
            /** @description The ready build's key (the building one's while there is none). */
            key?: string | null;
            name: string;
            /** @description What the ready build installed (not in lists; absent for builds that did not record it). */
            packages?: components["schemas"]["TemplatePackages"] | null;
            /** @description The owning project; `None` for built-ins. */
            project?: string | null;
            /** @description Every project may use it. */
            public: boolean;
            /**
             * Format: uint64
             * @description Bytes of its own layer (a built-in: of its whole root file system).
             */
            size_bytes: number;
            state: components["schemas"]["TemplateState"];
            /** Format: uint64 */
            updated_at: number;
            /**
             * @description Its builds, oldest first.
             * @default []
             */
            versions: components["schemas"]["TemplateVersion"][];
        };
        /** @description `GET /v1/templates`: the project's own templates, the public ones and the built-ins. */
        TemplateList: {
            templates: components["schemas"]["TemplateInfo"][];
        };
        /** @description The exact package versions a template build installed, by package manager. */
        TemplatePackages: {
            /**
             * @description Debian packages (`dpkg-query`): name → version.
             * @default {}
             */
            debian: {
                [key: string]: string;
            };
            /**
             * @description npm packages (npm's lock): install path under `node_modules` → version.
             * @default {}
             */
            node: {
                [key: string]: string;
            };
            /**
             * @description Python distributions of the template's venv (`pip list`): normalized name → version.
             * @default {}
             */
            python: {
                [key: string]: string;
            };
        };
        /**
         * @description A template's build state.
         * @enum {string}
         */
        TemplateState: "building" | "ready" | "failed";
        /** @description One build of a template. */
        TemplateVersion: {
            /**
             * Format: uint64
             * @description Milliseconds since the Unix epoch.
             */
            created_at: number;
            /**
             * @description The build's content key (hash of the base's key, the Dockerfile, the build args and the
             *     context).
             */
            key: string;
            /** Format: uint64 */
            size_bytes: number;
            state: components["schemas"]["TemplateState"];
        };
        /** @description What the server does with a sandbox whose timeout passed. */
        TimeoutAction: "kill" | "pause" | "hibernate";
        /**
         * @description `PATCH /v1/sandboxes/{id}/network`: what is given replaces that part of the sandbox's network;
         *     what is absent stays as it is.
         */
        UpdateNetworkRequest: {
            auto_resume?: boolean | null;
            egress?: components["schemas"]["Egress"] | null;
            inject?: components["schemas"]["InjectRequest"][] | null;
            public_ports?: boolean | null;
        };
        /**
         * @description `PATCH /v1/projects/{project}` (admin keys only): the settings given change, the others stay.
         *     A change reaches the project's sandboxes at their next start (create, resume, clone).
         */
        UpdateProjectRequest: {
            allow_egress?: boolean | null;
            package_registries?: boolean | null;
        };
        /** @description Usage totals (a project's, or one sandbox's). */
        UsageTotals: {
            /** Format: double */
            cpu_seconds: number;
            /**
             * Format: uint64
             * @default 0
             */
            egress_bytes_in: number;
            /**
             * Format: uint64
             * @description Bytes the sandboxes' egress carried out and in, and their connections and DNS queries
             *     refused.
             * @default 0
             */
            egress_bytes_out: number;
            /**
             * Format: uint64
             * @default 0
             */
            egress_refused: number;
            /** Format: double */
            execution_cpu_seconds: number;
            /** Format: double */
            execution_wall_seconds: number;
            /** Format: uint64 */
            executions: number;
            /**
             * Format: double
             * @description Time spent hibernated (on disk, no processes), metered apart from paused time.
             * @default 0
             */
            hibernated_seconds: number;
            /** Format: double */
            memory_gib_seconds: number;
            /**
             * Format: uint64
             * @description Body bytes the package registries' mirror sent to the sandboxes, and their requests to it.
             * @default 0
             */
            mirror_bytes: number;
            /**
             * Format: uint64
             * @default 0
             */
            mirror_requests: number;
            /** Format: double */
            paused_seconds: number;
            /** Format: double */
            running_seconds: number;
            /** Format: uint64 */
            sandboxes: number;
            /**
             * Format: double
             * @description Snapshot storage (each snapshot's size × its lifetime), GiB-hours; like volumes, a
             *     project's total since its snapshots were taken.
             * @default 0
             */
            snapshot_gib_hours: number;
            /**
             * Format: double
             * @description Volume storage (host disk use of the project's volumes, sampled), GiB-hours; a project's
             *     total since its volumes were created, not limited to the report's time range.
             * @default 0
             */
            volume_gib_hours: number;
        };
        /** @description A volume as the API reports it. */
        VolumeInfo: {
            /** Format: uint64 */
            created_at_ms: number;
            /**
             * @description Running or paused sandboxes that mount the volume.
             * @default []
             */
            mounted_by: string[];
            name: string;
            project: string;
            /** Format: uint64 */
            size_limit_bytes: number;
            /**
             * Format: uint64
             * @description Bytes in use in the volume's file system now (data and metadata, as `df` counts them).
             */
            used_bytes: number;
            /** @description `vol_` + 20 characters. */
            volume_id: string;
        };
        /** @description One entry of `volumes` in `POST /v1/sandboxes`. */
        VolumeMountRequest: {
            /** @description Absolute path inside the sandbox; `/home/user/<name>` when absent. */
            mount_path?: string | null;
            /** @description A volume of the sandbox's project, by name (or id). */
            name: string;
            /** @default false */
            read_only: boolean;
        };
        /** @description Storage use of one volume in a project's usage report. */
        VolumeUsage: {
            /** @description Deleted volumes keep their usage. */
            deleted: boolean;
            /**
             * Format: double
             * @description Bytes in use integrated over the volume's life (sampled), GiB-hours.
             */
            gib_hours: number;
            name: string;
            /**
             * Format: uint64
             * @description Bytes in use at the last sample.
             */
            used_bytes: number;
            volume_id: string;
        };
    };
    responses: never;
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export type operations = Record<string, never>;
