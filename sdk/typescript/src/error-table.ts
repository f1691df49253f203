// GENERATED FILE — do not edit by hand: `npm run gen:errors` makes it from sdk/errors.json.

/** Error code and HTTP status → the name of the SDK's error class (see errors.ts). */
export const BY_CODE: Readonly<Record<string, string>> = {
  build_failed: 'TemplateBuildError',
  conflict: 'ConflictError',
  insufficient_storage: 'SandboxError',
  internal: 'SandboxError',
  invalid_dockerfile: 'TemplateBuildError',
  invalid_request: 'InvalidArgumentError',
  not_found: 'NotFoundError',
  payload_too_large: 'InvalidArgumentError',
  permission_denied: 'AuthenticationError',
  rate_limited: 'RateLimitError',
  template_in_use: 'TemplateInUseError',
  unauthenticated: 'AuthenticationError',
  unavailable: 'SandboxError',
  unsupported: 'SandboxError',
  unsupported_media_type: 'InvalidArgumentError',
  volume_in_use: 'VolumeInUseError',
};

export const BY_STATUS: Readonly<Record<number, string>> = {
  400: 'InvalidArgumentError',
  401: 'AuthenticationError',
  403: 'AuthenticationError',
  404: 'NotFoundError',
  405: 'InvalidArgumentError',
  408: 'TimeoutError',
  409: 'ConflictError',
  413: 'InvalidArgumentError',
  415: 'InvalidArgumentError',
  429: 'RateLimitError',
  504: 'TimeoutError',
};
