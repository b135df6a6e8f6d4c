/** `@lease/client`: a typed client and worker for `lease serve`. */
export { LeaseClient, leaseOf } from './client.js';
export type { ClientOptions, ClaimOptions, Completion, JobView, Lease, LeaseView, NewJob, Payload, Schemas } from './client.js';
export { LeaseError } from './errors.js';
export type { Problem } from './errors.js';
export {
  Keyring, SealError, KEY_VAR, KEY_FILE_VAR, REQUIRE_VAR, openCheckpoint, openPayload, openProgress, openResult, payloadEnvelope, requireSealedFromEnv,
  resultEnvelope, sealedPayloadKey, sealedResultKey,
} from './seal.js';
export type { Envelope } from './seal.js';
export { Worker, StopReason } from './worker.js';
export type { Handler, Job, Summary, TraceContext, WorkerOptions } from './worker.js';
export type { components, paths } from './schema.js';
