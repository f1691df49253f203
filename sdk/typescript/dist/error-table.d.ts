/** Error code and HTTP status → the name of the SDK's error class (see errors.ts). */
export declare const BY_CODE: Readonly<Record<string, string>>;
export declare const BY_STATUS: Readonly<Record<number, string>>;
