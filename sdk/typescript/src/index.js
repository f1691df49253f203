// Entry point of `@lizard-build/sdk`: re-exports the public API (CodeSandbox, the execution types
// and the typed errors). No logic lives here. Types are in index.d.ts, written by hand: the
// package ships its plain-JavaScript ESM sources as they are, with no build step.

export { CodeSandbox, DEFAULT_TEMPLATE } from './sandbox.js';
export { Execution, ExecutionError, Result } from './execution.js';
export {
  AuthenticationError,
  CommandExitError,
  ConflictError,
  ConnectionError,
  InvalidArgumentError,
  LizardError,
  NotFoundError,
  RateLimitError,
  SandboxError,
  TemplateBuildError,
  TemplateInUseError,
  TimeoutError,
  VolumeInUseError,
} from './errors.js';
export { Volumes } from './volumes.js';
export { Templates } from './templates.js';
export { Snapshots } from './snapshots.js';
export { Secrets } from './secrets.js';
export { DEFAULT_API_URL } from './http.js';
