/**
 * A client for every route of `lease serve`'s API, typed from its OpenAPI document
 * (`openapi.json`, compared with the server's own in the tests). Each method sends one request
 * and returns the answer's body; a refusal throws a {@link LeaseError} with the server's reason.
 * Answers 503 (overloaded, unavailable) and 429 (rate limited) applied nothing, so they are
 * sent again after their `Retry-After`, a few times.
 */
import { ROOT_CONTEXT, context, propagation, type Context } from '@opentelemetry/api';
import createClient from 'openapi-fetch';
import type { components, paths } from './schema.js';
import { LeaseError } from './errors.js';
import { KEY_FILE_VAR, KEY_VAR, Keyring, REQUIRE_VAR, SealError, openPayload, requireSealedFromEnv, sealedPayloadKey } from './seal.js';

export type Schemas = components['schemas'];
export type JobView = Schemas['JobView'];
export type LeaseView = Schemas['LeaseView'];

/** How a client reaches the server. */
export interface ClientOptions {
  /** The server's URL, such as `http://127.0.0.1:7070`. */
  url: string;
  /** The API key (sent as a bearer token); a server without keys listens on loopback only. */
  apiKey?: string;
  /**
   * The keys that seal payloads this client enqueues and open those it leases (docs/ENCRYPTION.md).
   * Default: the environment's (`LEASE_PAYLOAD_KEY` or `LEASE_PAYLOAD_KEY_FILE`); `null`: none.
   */
  keys?: Keyring | null;
  /**
   * Require sealed values (default: `LEASE_REQUIRE_SEALED` in the environment): a payload this
   * client cannot seal (no keys) is refused before anything is sent, a plain payload it leases
   * does not open, and a `Worker` over it seals every result.
   */
  requireSealed?: boolean;
  /** How many times an answer that applied nothing (503, 429) is sent again (default 4). */
  retries?: number;
  /** A fetch to send with (tests, proxies); default the global one. */
  fetch?: (input: Request) => Promise<Response>;
}

/** A payload as a producer gives it: text, or bytes. */
export type Payload = string | Uint8Array;

/** A job to enqueue. */
export interface NewJob {
  id: string;
  payload?: Payload | null;
  priority?: number;
  /** Not claimable before this time (Unix seconds). */
  runAt?: number;
  maxAttempts?: number;
  /** Further fields of the API's enqueue body, as it names them (`group`, `after`, `timeout`, ...). */
  extra?: Omit<Schemas['EnqueueBody'], 'id' | 'payload' | 'payload_base64'>;
}

/** A lease the server granted: present `fence` to every resource and `token` with every write. */
export interface Lease {
  id: string;
  fence: number;
  /** The lease is live until then (Unix seconds). */
  until: number;
  attempt: number;
  /** How long this attempt may run, in seconds, if it has a limit. */
  timeout: number | null;
  group: string | null;
  /** The lease's own secret, sent as `Lease-Token`. */
  token: string;
  /** The payload's bytes as stored (a sealed payload's sealed bytes), or null. */
  payload: Buffer | null;
  /** The name of the key a sealed payload was sealed with. */
  payloadKey: string | null;
}

/** A claim's options. */
export interface ClaimOptions {
  ttl: number;
  limit?: number;
  /** Seconds to wait for a job to come due (a long poll; at most 20). */
  wait?: number;
  owner?: string;
  signal?: AbortSignal;
}

/** What a completion answered. */
export interface Completion {
  ok: boolean;
  resultFence: number | null;
  /** The leases the completion's claim granted (empty without one). */
  leases: Lease[];
  /** With `ok` false: the refusal. */
  refusal: LeaseError | null;
}

/** Reads a lease as the API gives it. */
export function leaseOf(view: LeaseView): Lease {
  let payload: Buffer | null = null;
  if (typeof view.payload_base64 === 'string') payload = Buffer.from(view.payload_base64, 'base64');
  else if (typeof view.payload === 'string') payload = Buffer.from(view.payload, 'utf8');
  return {
    id: view.id,
    fence: view.fence,
    until: view.until,
    attempt: view.attempt,
    timeout: view.timeout ?? null,
    group: view.group ?? null,
    token: view.lease_token,
    payload,
    payloadKey: view.payload_encrypted?.key ?? null,
  };
}

const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });

/** The body of an answer that is not a success, read as JSON when it is. */
async function errorBody(response: Response): Promise<unknown> {
  const text = await response.text().catch(() => '');
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

type Answer<D> = { data?: D; error?: unknown; response: Response };

/** The most writes one request carries (the server takes 100). */
const MAX_WRITES = 100;
/** How many requests of gathered writes may be out at once. */
const IN_FLIGHT = 2;

/** A write waiting to be sent, and where its answer goes. */
interface Waiting {
  write: Schemas['LeaseWrite'];
  resolve: (answer: Schemas['WriteAnswer']) => void;
  reject: (error: unknown) => void;
  context: Context;
}

/** The statuses of a refusal a completion that carried a claim answers as `ok: false`. */
const SETTLED_REFUSALS = new Set([404, 409]);

/** A write's refusal, as the error its own endpoint would have thrown. */
function refusalOf(problem: Schemas['ProblemBody']): LeaseError {
  return new LeaseError(problem.status, problem.reason, `${problem.status} ${problem.reason}: ${problem.detail}`, problem);
}

/** The client. */
export class LeaseClient {
  /** The typed openapi-fetch client underneath, for anything the methods do not cover. */
  readonly api: ReturnType<typeof createClient<paths>>;
  /** The keys payloads are sealed and opened with, if any. */
  readonly keys: Keyring | undefined;
  /** Whether sealed values are required (see {@link ClientOptions.requireSealed}). */
  readonly requireSealed: boolean;
  /** Holders' writes waiting to be sent, many to a request. */
  private readonly waiting: Waiting[] = [];
  /** Requests of gathered writes out now. */
  private sending = 0;

  constructor(options: ClientOptions) {
    this.keys = options.keys === null ? undefined : (options.keys ?? Keyring.fromEnv());
    this.requireSealed = options.requireSealed ?? requireSealedFromEnv();
    const retries = options.retries ?? 4;
    const send = options.fetch ?? ((r: Request) => globalThis.fetch(r));
    const fetchWithRetry = async (request: Request): Promise<Response> => {
      // The active OpenTelemetry context's `traceparent` and `tracestate` (nothing unless an
      // SDK is registered): an enqueue's jobs keep it, and the server's span of the request
      // joins it.
      propagation.inject(context.active(), request.headers, {
        set: (headers, key, value) => headers.set(key, value),
      });
      for (let attempt = 0; ; attempt++) {
        const response = await send(attempt < retries ? request.clone() : request);
        if ((response.status !== 503 && response.status !== 429) || attempt >= retries || request.signal.aborted) {
          return response;
        }
        const after = Number(response.headers.get('Retry-After') ?? '1');
        await response.body?.cancel();
        await sleep(Math.min(Number.isFinite(after) && after > 0 ? after : 1, 5) * 1000, request.signal);
      }
    };
    const headers: Record<string, string> = {};
    if (options.apiKey !== undefined) headers.Authorization = `Bearer ${options.apiKey}`;
    this.api = createClient<paths>({
      baseUrl: options.url.replace(/\/+$/, ''),
      headers,
      fetch: fetchWithRetry,
    });
  }

  private async ok<D>(answer: Promise<Answer<D>>): Promise<D> {
    let got: Answer<D>;
    try {
      got = await answer;
    } catch (e) {
      if (e instanceof LeaseError) throw e;
      const why = e instanceof Error ? e.message : String(e);
      throw new LeaseError(0, 'connection', `no answer from the server: ${why}`, undefined, e);
    }
    if (!got.response.ok) {
      const body = got.error !== undefined ? got.error : await errorBody(got.response);
      throw LeaseError.fromAnswer(got.response, body);
    }
    return got.data as D;
  }

  private payloadFields(id: string, payload: Payload | null | undefined): Pick<Schemas['EnqueueBody'], 'payload' | 'payload_base64'> {
    if (payload === undefined || payload === null) return {};
    if (this.keys !== undefined) {
      return { payload_base64: this.keys.sealPayload(id, payload).toString('base64') };
    }
    if (this.requireSealed) {
      throw new SealError(`the payload of job ${id} cannot be sealed: sealed values are required (${REQUIRE_VAR}) and no key is given (${KEY_VAR} or ${KEY_FILE_VAR})`);
    }
    if (typeof payload === 'string') return { payload };
    return { payload_base64: Buffer.from(payload).toString('base64') };
  }

  /** A job as the API's enqueue bodies take it, its payload sealed when the client has keys. */
  private jobBody(job: NewJob): Schemas['EnqueueBody'] {
    return {
      ...job.extra,
      id: job.id,
      ...this.payloadFields(job.id, job.payload),
      ...(job.priority !== undefined ? { priority: job.priority } : {}),
      ...(job.runAt !== undefined ? { run_at: job.runAt } : {}),
      ...(job.maxAttempts !== undefined ? { max_attempts: job.maxAttempts } : {}),
    };
  }

  // ----- queue -----

  /** Enqueues a job (sealing its payload when the client has keys); whether it was new. */
  async enqueue(queue: string, job: NewJob): Promise<boolean> {
    const body: Schemas['EnqueueBody'] = this.jobBody(job);
    const r = await this.ok(this.api.POST('/v1/queues/{queue}/jobs', { params: { path: { queue } }, body }));
    return r.inserted;
  }

  /** Enqueues jobs in one transaction (each may name its own `queue` in `extra`); for each, whether it was new. */
  async enqueueMany(queue: string, jobs: NewJob[]): Promise<boolean[]> {
    const body: Schemas['EnqueueManyBody'] = {
      jobs: jobs.map((job) => this.jobBody(job)),
    };
    const r = await this.ok(this.api.POST('/v1/queues/{queue}/jobs/batch', { params: { path: { queue } }, body }));
    return r.inserted;
  }

  /** Claims due jobs of a queue (waiting up to `wait` seconds for one); possibly none. */
  async claimNext(queue: string, options: ClaimOptions): Promise<{ leases: Lease[]; throttledUntil: number | null }> {
    const body: Schemas['ClaimBody'] = { ttl: options.ttl };
    if (options.limit !== undefined) body.limit = options.limit;
    if (options.wait !== undefined) body.wait = options.wait;
    if (options.owner !== undefined) body.owner = options.owner;
    const init = options.signal === undefined ? {} : { signal: options.signal };
    const r = await this.ok(this.api.POST('/v1/queues/{queue}/claims', { params: { path: { queue } }, body, ...init }));
    return { leases: r.leases.map(leaseOf), throttledUntil: r.throttled_until ?? null };
  }

  /** Claims one job by id. */
  async claim(id: string, options: { ttl: number; owner?: string }): Promise<Lease> {
    const body: Schemas['ClaimOneBody'] = { ttl: options.ttl };
    if (options.owner !== undefined) body.owner = options.owner;
    return leaseOf(await this.ok(this.api.POST('/v1/jobs/{id}/claim', { params: { path: { id } }, body })));
  }

  /** A lease's payload opened with the client's keys (a plain payload as it is). */
  openPayload(lease: Pick<Lease, 'id' | 'payload'>): Buffer | null {
    if (lease.payload === null) return null;
    return openPayload(this.keys, lease.id, lease.payload, this.requireSealed);
  }

  // ----- a holder's writes -----

  private token(lease: Lease) {
    return { header: { 'Lease-Token': lease.token }, path: { id: lease.id } };
  }

  /** Renews a lease for `ttl` seconds from now; when it now ends. */
  async renew(lease: Lease, ttl: number): Promise<number> {
    const r = await this.ok(this.api.POST('/v1/jobs/{id}/renew', { params: this.token(lease), body: { fence: lease.fence, ttl } }));
    return r.until;
  }

  /**
   * Completes a job with its result; with `claim`, leases the queue's next jobs in the same
   * transaction. A refused completion throws, unless it carried a claim: then the answer says
   * `ok: false` with the refusal, and the claim's leases stand either way.
   */
  async complete(lease: Lease, result: string, claim?: { queue: string; ttl: number; limit?: number }): Promise<Completion> {
    const write: Schemas['LeaseWrite'] = { op: 'complete', ...this.held(lease), result };
    if (claim !== undefined) write.claim = { queue: claim.queue, ttl: claim.ttl, ...(claim.limit !== undefined ? { limit: claim.limit } : {}) };
    const r = await this.settleOne(write);
    if (r.claim_refused) throw refusalOf(r.claim_refused);
    const refusal = r.refused ? refusalOf(r.refused) : null;
    if (refusal !== null && (claim === undefined || !SETTLED_REFUSALS.has(refusal.status))) throw refusal;
    return { ok: r.ok, resultFence: r.result_fence ?? null, leases: (r.leases ?? []).map(leaseOf), refusal };
  }

  /** Reports a failure: the job is retried after a backoff while attempts remain (`retry` false: dead at once). */
  async fail(lease: Lease, error: string, options: { retry?: boolean; backoff?: Schemas['BackoffBody'] } = {}): Promise<Schemas['FailedView']> {
    const write: Schemas['LeaseWrite'] = { op: 'fail', ...this.held(lease), error };
    if (options.retry !== undefined) write.retry = options.retry;
    if (options.backoff !== undefined) write.backoff = options.backoff;
    const r = await this.settleOne(write);
    if (r.refused) throw refusalOf(r.refused);
    if (r.state === undefined || r.state === null) throw new LeaseError(0, 'malformed', 'the server recorded the failure without naming its state');
    return { state: r.state, run_at: r.run_at ?? null };
  }

  /** Gives a lease back (`unstarted`: the attempt its claim counted is given back too). */
  async release(lease: Lease, options: { unstarted?: boolean } = {}): Promise<void> {
    const write: Schemas['LeaseWrite'] = { op: 'release', ...this.held(lease) };
    if (options.unstarted !== undefined) write.unstarted = options.unstarted;
    const r = await this.settleOne(write);
    if (r.refused) throw refusalOf(r.refused);
  }

  /**
   * Completes, fails and releases several leases in one request, each with its own token and
   * fence and each answered on its own, then (with `claim`) leases the queue's next jobs.
   * `complete`, `fail` and `release` send through this, many at once when made together.
   */
  async settle(writes: Schemas['LeaseWrite'][], claim?: Schemas['SettleClaim']): Promise<Schemas['Settled']> {
    const body: Schemas['SettleBody'] = { writes };
    if (claim !== undefined) body.claim = claim;
    return this.ok(this.api.POST('/v1/leases/settle', { body }));
  }

  private held(lease: Lease): Pick<Schemas['LeaseWrite'], 'id' | 'fence' | 'lease_token'> {
    return { id: lease.id, fence: lease.fence, lease_token: lease.token };
  }

  /**
   * Sends `write` with the others made meanwhile: at once when fewer than {@link IN_FLIGHT}
   * requests are out, else in the next request, with every write that waits (up to 100).
   * Its own answer; a request that failed as a whole throws for each of its writes.
   */
  private settleOne(write: Schemas['LeaseWrite']): Promise<Schemas['WriteAnswer']> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ write, resolve, reject, context: context.active() });
      if (this.sending < IN_FLIGHT) {
        this.sending++;
        void this.flush();
      }
    });
  }

  private async flush(): Promise<void> {
    while (this.waiting.length > 0) {
      const batch = this.waiting.splice(0, MAX_WRITES);
      // A write alone is sent in its caller's trace; writes of many traces in none.
      const within = batch.length === 1 ? batch[0]!.context : ROOT_CONTEXT;
      try {
        const settled = await context.with(within, () => this.settle(batch.map((w) => w.write)));
        if (settled.writes.length !== batch.length) {
          throw new LeaseError(0, 'malformed', `the server answered ${settled.writes.length} writes for ${batch.length}`);
        }
        batch.forEach((w, n) => w.resolve(settled.writes[n]!));
      } catch (e) {
        for (const w of batch) w.reject(e);
      }
    }
    this.sending--;
  }

  /** Reports progress (and renews for `ttl` seconds when given); when the lease now ends, if renewed. */
  async progress(lease: Lease, progress: string, ttl?: number): Promise<number | null> {
    const body: Schemas['ProgressBody'] = { fence: lease.fence, progress };
    if (ttl !== undefined) body.ttl = ttl;
    const r = await this.ok(this.api.POST('/v1/jobs/{id}/progress', { params: this.token(lease), body }));
    return r.until ?? null;
  }

  /** Holds the job's group until a time (its upstream said 429). */
  async holdGroup(lease: Lease, until: number): Promise<void> {
    await this.ok(this.api.POST('/v1/jobs/{id}/hold-group', { params: this.token(lease), body: { fence: lease.fence, until } }));
  }

  /** Keeps a step's result under the lease's fence (a later value of the name replaces it). */
  async keepCheckpoint(lease: Lease, name: string, value: string): Promise<void> {
    await this.ok(this.api.POST('/v1/jobs/{id}/checkpoints', { params: this.token(lease), body: { fence: lease.fence, name, value } }));
  }

  /** A job's checkpoints, in name order. */
  async checkpoints(id: string): Promise<Schemas['CheckpointView'][]> {
    const r = await this.ok(this.api.GET('/v1/jobs/{id}/checkpoints', { params: { path: { id } } }));
    return r.checkpoints;
  }

  /** A job's attempts by fence (the ended ones kept, then the one under way), each with the
   * writes refused with its fence; `older` counts the earlier attempts no longer kept. */
  async attempts(id: string): Promise<Schemas['AttemptsBody']> {
    return this.ok(this.api.GET('/v1/jobs/{id}/attempts', { params: { path: { id } } }));
  }

  // ----- reading jobs -----

  /** A job as it stands (404 is a LeaseError with reason `not_found`). */
  async job(id: string): Promise<JobView> {
    return this.ok(this.api.GET('/v1/jobs/{id}', { params: { path: { id } } }));
  }

  /** A page of jobs in id order. */
  async jobs(query: NonNullable<paths['/v1/jobs']['get']['parameters']['query']> = {}): Promise<Schemas['JobPage']> {
    return this.ok(this.api.GET('/v1/jobs', { params: { query } }));
  }

  /** A job's children (jobs that named it as a parent). */
  async children(id: string, query: NonNullable<paths['/v1/jobs/{id}/children']['get']['parameters']['query']> = {}): Promise<Schemas['Children']> {
    return this.ok(this.api.GET('/v1/jobs/{id}/children', { params: { path: { id }, query } }));
  }

  /** A job's workflow around it: its ancestors and descendants (breadth first, at most
   * `limit` jobs, the job counted), every dependency between them, and how many jobs were met
   * beyond the bound. */
  async graph(id: string, query: NonNullable<paths['/v1/jobs/{id}/graph']['get']['parameters']['query']> = {}): Promise<Schemas['GraphBody']> {
    return this.ok(this.api.GET('/v1/jobs/{id}/graph', { params: { path: { id }, query } }));
  }

  // ----- admin -----

  /** Cancels a waiting, pending, running or dead job (a dead one keeps its record and error, and frees its ordered group). */
  async cancel(id: string): Promise<void> {
    await this.ok(this.api.POST('/v1/jobs/{id}/cancel', { params: { path: { id } }, body: {} }));
  }

  async retry(id: string): Promise<void> {
    await this.ok(this.api.POST('/v1/jobs/{id}/retry', { params: { path: { id } }, body: {} }));
  }

  async purge(body: Schemas['PurgeBody']): Promise<Schemas['Purged']> {
    return this.ok(this.api.POST('/v1/purge', { body }));
  }

  /**
   * Retries or cancels every job a filter matches (an admin's; `status` by default `dead` for a
   * retry, `pending` for a cancel), in batches of at most 500; with `dry_run` only counts them.
   */
  async bulk(body: Schemas['BulkBody']): Promise<Schemas['BulkAnswer']> {
    return this.ok(this.api.POST('/v1/bulk', { body }));
  }

  async queues(): Promise<Schemas['Queues']> {
    return this.ok(this.api.GET('/v1/queues'));
  }

  async pause(queue: string, until?: number): Promise<Schemas['QueueView']> {
    return this.ok(this.api.POST('/v1/queues/{queue}/pause', { params: { path: { queue } }, body: until === undefined ? {} : { until } }));
  }

  async resume(queue: string): Promise<Schemas['QueueView']> {
    return this.ok(this.api.POST('/v1/queues/{queue}/resume', { params: { path: { queue } }, body: {} }));
  }

  async pauseGroup(queue: string, group: string, until?: number): Promise<Schemas['QueueView']> {
    return this.ok(this.api.POST('/v1/queues/{queue}/groups/{group}/pause', { params: { path: { queue, group } }, body: until === undefined ? {} : { until } }));
  }

  async resumeGroup(queue: string, group: string): Promise<Schemas['QueueView']> {
    return this.ok(this.api.POST('/v1/queues/{queue}/groups/{group}/resume', { params: { path: { queue, group } }, body: {} }));
  }

  async groups(queue: string, limit?: number): Promise<Schemas['GroupsView']> {
    return this.ok(this.api.GET('/v1/queues/{queue}/groups', { params: { path: { queue }, query: limit === undefined ? {} : { limit } } }));
  }

  async limits(queue: string): Promise<Schemas['QueueView']> {
    return this.ok(this.api.GET('/v1/queues/{queue}/limits', { params: { path: { queue } } }));
  }

  async setLimits(queue: string, body: Schemas['LimitsBody']): Promise<Schemas['QueueView']> {
    return this.ok(this.api.PUT('/v1/queues/{queue}/limits', { params: { path: { queue } }, body }));
  }

  async throttle(queue: string): Promise<Schemas['ThrottleView']> {
    return this.ok(this.api.GET('/v1/queues/{queue}/throttle', { params: { path: { queue } } }));
  }

  // ----- schedules -----

  async schedules(): Promise<Schemas['Schedules']> {
    return this.ok(this.api.GET('/v1/schedules'));
  }

  async putSchedule(name: string, body: Schemas['ScheduleBody']): Promise<Schemas['ScheduleView']> {
    return this.ok(this.api.PUT('/v1/schedules/{name}', { params: { path: { name } }, body }));
  }

  async removeSchedule(name: string): Promise<Schemas['Removed']> {
    return this.ok(this.api.DELETE('/v1/schedules/{name}', { params: { path: { name } } }));
  }

  async fireSchedule(name: string, body: Schemas['FireBody']): Promise<Schemas['FiredView']> {
    return this.ok(this.api.POST('/v1/schedules/{name}/fire', { params: { path: { name } }, body }));
  }

  async runSchedule(name: string): Promise<Schemas['RanView']> {
    return this.ok(this.api.POST('/v1/schedules/{name}/run', { params: { path: { name } }, body: {} }));
  }

  // ----- overview and service -----

  async stats(): Promise<Schemas['Stats']> {
    return this.ok(this.api.GET('/v1/stats'));
  }

  async activity(minutes?: number): Promise<Schemas['Activity']> {
    return this.ok(this.api.GET('/v1/activity', { params: { query: minutes === undefined ? {} : { minutes } } }));
  }

  async refusals(query: NonNullable<paths['/v1/refusals']['get']['parameters']['query']> = {}): Promise<Schemas['Refusals']> {
    return this.ok(this.api.GET('/v1/refusals', { params: { query } }));
  }

  async health(): Promise<Schemas['Health']> {
    return this.ok(this.api.GET('/healthz'));
  }

  /** The Prometheus text of `/metrics`. */
  async metrics(): Promise<string> {
    return this.ok(this.api.GET('/metrics', { parseAs: 'text' }));
  }

  /** The server's OpenAPI document. */
  async openapi(): Promise<Record<string, unknown>> {
    return this.ok(this.api.GET('/openapi.json')) as Promise<Record<string, unknown>>;
  }
}

export { SealError, sealedPayloadKey };
