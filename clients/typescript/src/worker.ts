/**
 * A worker over `lease serve`, with the behaviour of Python's `lease.Worker`: it long-polls for
 * due jobs, renews each lease every `ttl * renewFraction` seconds, runs the handler with an
 * `AbortSignal` that fires the moment the lease is lost, the job is cancelled or its timeout
 * passes, stores what the handler returns (completing with the next claim in one request) or
 * fails the job with the error's text, and on SIGTERM (or SIGINT, or {@link Worker.stop}) stops
 * claiming and lets running jobs finish within `drain` seconds before releasing the rest.
 * A claim in flight when it stops is not cut off (its leases would be lost until they
 * expire): it ends within its `wait`, and what it granted is released unstarted.
 *
 * The fence is the safety: a handler that goes on after its signal fired can still write, but
 * every write it presents with its fence (to the store, or a guarded resource through
 * {@link Job.guardHeaders}) is refused once another lease exists.
 */
import { hostname } from 'node:os';
import {
  ROOT_CONTEXT, SpanKind, SpanStatusCode, context, createTraceState, trace,
  type Link, type Span, type SpanContext, type Tracer,
} from '@opentelemetry/api';
import { LeaseError } from './errors.js';
import { LeaseClient, type Lease } from './client.js';
import { openCheckpoint } from './seal.js';
import type { components } from './schema.js';

/** What a handler gets. */
export interface Job {
  readonly id: string;
  readonly fence: number;
  readonly attempt: number;
  readonly group: string | null;
  /** The payload's bytes, opened when it was sealed; null without one. */
  readonly payload: Buffer | null;
  /** The payload as UTF-8 text; null without one. */
  readonly text: string | null;
  /** Fires when the job must stop: its `reason` is a {@link StopReason}. */
  readonly signal: AbortSignal;
  /** The lease itself, for the client's lower-level calls. */
  readonly lease: Lease;
  /** Says how the job is going (and renews its lease). */
  progress(text: string): Promise<void>;
  /** Keeps a step's result under this lease's fence. */
  checkpoint(name: string, value: string): Promise<void>;
  /** The job's checkpoints by name (those of earlier attempts included). */
  checkpoints(): Promise<Map<string, string>>;
  /** `Lease-Job` and `Lease-Fence`, for a write to an HTTP resource guarded by the fence. */
  guardHeaders(): Record<'Lease-Job' | 'Lease-Fence', string>;
  /**
   * The W3C trace context the job was enqueued with, or null: read with the attempt when the
   * worker has a `tracer`, else from the server the first time it is asked (propagation does
   * not depend on export, so a handler with an SDK of its own can continue the job's trace).
   */
  traceContext(): Promise<TraceContext | null>;
}

/** A job's stored W3C trace context. */
export interface TraceContext {
  readonly traceparent: string;
  readonly tracestate: string | null;
}

/** Why a job's signal fired. */
export class StopReason extends Error {
  constructor(
    /** `lost` (another lease, an expiry, gone), `cancelled`, `timeout` or `draining`. */
    readonly why: 'lost' | 'cancelled' | 'timeout' | 'draining',
    message: string,
  ) {
    super(message);
    this.name = 'StopReason';
  }
}

/** A handler: its return value (a string, or nothing for an empty result) is the job's result. */
export type Handler = (job: Job) => Promise<string | void | undefined> | string | void | undefined;

export interface WorkerOptions {
  queue?: string;
  owner?: string;
  /** Seconds each lease lasts between renewals (default 30). */
  ttl?: number;
  /** Jobs run at once (default 1). */
  concurrency?: number;
  /** Renew every `ttl * renewFraction` seconds (default 1/3). */
  renewFraction?: number;
  /** Seconds a claim waits for a job to come due (default 5, at most 20). */
  wait?: number;
  /** A failed job is retried while attempts remain (default true); false: dead at once. */
  retry?: boolean;
  backoff?: components['schemas']['BackoffBody'];
  /** Stop after this many jobs ended (completed, failed or lost). */
  maxJobs?: number;
  /** Stop once a claim finds nothing and no job runs. */
  exitWhenEmpty?: boolean;
  /** Seconds running jobs get to finish once stopping (default 30). */
  drain?: number;
  /** Seal each result with the client's sealing key (docs/ENCRYPTION.md). */
  sealResults?: boolean;
  /** Stop on SIGTERM and SIGINT (default true). */
  handleSignals?: boolean;
  /**
   * Each attempt is a span `lease.attempt` of this tracer, joined to the trace its job was
   * enqueued in: a child of the enqueuing span on the first attempt, a link to it on later ones
   * (a retry starts a trace of its own). The handler runs in the span's context, so its own
   * spans and enqueues join it, and so do the worker's renewals and report. Reading the job's
   * trace context is one more request an attempt; without a tracer none is made.
   */
  tracer?: Tracer;
  /** Called with each error the loop survives (a claim that got no answer, a refused write). */
  onError?: (error: unknown) => void;
}

/** What a run did. */
export interface Summary {
  completed: number;
  failed: number;
  /** Jobs whose lease was lost, cancelled or released unfinished. */
  lost: number;
}

/** The default owner: host and process, so two workers never share one. */
function defaultOwner(): string {
  const host = hostname().replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 40) || 'host';
  return `ts-${host}-${process.pid}`;
}

export class Worker {
  readonly owner: string;
  private readonly queue: string;
  private readonly ttl: number;
  private readonly concurrency: number;
  private readonly renewEvery: number;
  private readonly wait: number;
  private readonly options: WorkerOptions;
  private readonly running = new Set<Promise<void>>();
  private readonly stopping = new AbortController();
  private readonly draining = new AbortController();
  private readonly jobs = new Map<string, AbortController>();
  /** The trace context a traced attempt read, by job, while the attempt runs. */
  private readonly traces = new Map<string, TraceContext | null>();
  private started = 0;
  private readonly summary: Summary = { completed: 0, failed: 0, lost: 0 };

  constructor(
    private readonly client: LeaseClient,
    private readonly handler: Handler,
    options: WorkerOptions = {},
  ) {
    this.options = options;
    this.queue = options.queue ?? 'default';
    this.owner = options.owner ?? defaultOwner();
    this.ttl = options.ttl ?? 30;
    this.concurrency = options.concurrency ?? 1;
    this.renewEvery = this.ttl * (options.renewFraction ?? 1 / 3);
    this.wait = Math.min(options.wait ?? 5, 20);
    if (!(this.ttl > 0)) throw new RangeError(`ttl: must be more than 0 seconds, got ${this.ttl}`);
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1) {
      throw new RangeError(`concurrency: must be a whole number of at least 1, got ${this.concurrency}`);
    }
    if (!(this.renewEvery > 0 && this.renewEvery < this.ttl)) {
      throw new RangeError('renewFraction: must be between 0 and 1');
    }
    if (options.sealResults && client.keys === undefined) {
      throw new RangeError('sealResults: needs a key (LEASE_PAYLOAD_KEY or LEASE_PAYLOAD_KEY_FILE, or the client\'s keys)');
    }
    if (client.requireSealed && client.keys === undefined) {
      throw new RangeError('requireSealed: needs a key (LEASE_PAYLOAD_KEY or LEASE_PAYLOAD_KEY_FILE, or the client\'s keys)');
    }
  }

  /** Stops claiming; running jobs get `drain` seconds, then are stopped and released. */
  stop(): void {
    this.stopping.abort();
  }

  private report(error: unknown): void {
    this.options.onError?.(error);
  }

  /** Claims and runs jobs until stopped, `maxJobs` ended, or (with `exitWhenEmpty`) the queue is empty. */
  async run(): Promise<Summary> {
    const onSignal = () => this.stop();
    const handle = this.options.handleSignals ?? true;
    if (handle) {
      process.on('SIGTERM', onSignal);
      process.on('SIGINT', onSignal);
    }
    try {
      await this.loop();
      await this.drainAll();
      return { ...this.summary };
    } finally {
      if (handle) {
        process.off('SIGTERM', onSignal);
        process.off('SIGINT', onSignal);
      }
    }
  }

  private wanted(): number {
    const room = this.concurrency - this.running.size;
    const left = this.options.maxJobs === undefined ? room : Math.min(room, this.options.maxJobs - this.started);
    return Math.max(0, left);
  }

  private async loop(): Promise<void> {
    const stop = this.stopping.signal;
    while (!stop.aborted) {
      if (this.options.maxJobs !== undefined && this.started >= this.options.maxJobs) return;
      const limit = this.wanted();
      if (limit === 0) {
        await Promise.race([...this.running, aborted(stop)]);
        continue;
      }
      const empty = this.options.exitWhenEmpty ?? false;
      let claimed;
      try {
        claimed = await this.client.claimNext(this.queue, {
          ttl: this.ttl,
          limit,
          wait: empty ? 0 : this.wait,
          owner: this.owner,
        });
      } catch (e) {
        if (stop.aborted) return;
        this.report(e);
        await delay(1000, stop);
        continue;
      }
      for (const lease of claimed.leases) this.start(lease);
      if (claimed.leases.length === 0) {
        if (empty) {
          if (this.running.size === 0) return;
          await Promise.race([...this.running, aborted(stop)]);
        } else if (claimed.throttledUntil !== null) {
          await delay(Math.max(0, claimed.throttledUntil * 1000 - Date.now()), stop);
        }
      }
    }
  }

  private start(lease: Lease): void {
    if (this.stopping.signal.aborted || (this.options.maxJobs !== undefined && this.started >= this.options.maxJobs)) {
      // A lease the completion's claim granted as the worker stopped: given back unstarted.
      this.client.release(lease, { unstarted: true }).catch((e) => this.report(e));
      return;
    }
    this.started++;
    const task: Promise<void> = this.runOne(lease).finally(() => this.running.delete(task));
    this.running.add(task);
  }

  private async runOne(first: Lease): Promise<void> {
    let lease: Lease | undefined = first;
    while (lease !== undefined) {
      lease = await this.attempt(lease);
      if (lease !== undefined) {
        if (this.stopping.signal.aborted || (this.options.maxJobs !== undefined && this.started >= this.options.maxJobs)) {
          await this.client.release(lease, { unstarted: true }).catch((e) => this.report(e));
          return;
        }
        this.started++;
      }
    }
  }

  /** Runs one lease to its end, in its attempt's span when the worker traces. */
  private async attempt(lease: Lease): Promise<Lease | undefined> {
    const tracer = this.options.tracer;
    if (tracer === undefined) return this.attemptUntraced(lease);
    const span = await this.attemptSpan(tracer, lease);
    return context.with(trace.setSpan(ROOT_CONTEXT, span), async () => {
      try {
        return await this.attemptUntraced(lease);
      } finally {
        span.end();
      }
    });
  }

  /**
   * The attempt's span, joined to the job's trace context (a child on the first attempt, a
   * link after). Tracing never fails a job: a context that cannot be read leaves it unjoined.
   * Attributes carry ids, the queue, the fence and the attempt, never the payload or result.
   */
  private async attemptSpan(tracer: Tracer, lease: Lease): Promise<Span> {
    let enqueued: SpanContext | undefined;
    try {
      const view = await this.client.job(lease.id);
      this.traces.set(lease.id, view.traceparent ? { traceparent: view.traceparent, tracestate: view.tracestate ?? null } : null);
      const parts = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(view.traceparent ?? '');
      if (parts !== null) {
        enqueued = {
          traceId: parts[1] as string,
          spanId: parts[2] as string,
          traceFlags: Number.parseInt(parts[3] as string, 16) & 1,
          isRemote: true,
          ...(view.tracestate ? { traceState: createTraceState(view.tracestate) } : {}),
        };
      }
    } catch (e) {
      this.report(e);
    }
    const first = lease.attempt <= 1;
    const parent = enqueued !== undefined && first ? trace.setSpanContext(ROOT_CONTEXT, enqueued) : ROOT_CONTEXT;
    const links: Link[] = enqueued !== undefined && !first ? [{ context: enqueued }] : [];
    return tracer.startSpan('lease.attempt', {
      kind: SpanKind.CONSUMER,
      root: parent === ROOT_CONTEXT,
      links,
      attributes: { job: lease.id, queue: this.queue, fence: lease.fence, attempt: lease.attempt },
    }, parent);
  }

  /** Runs one lease to its end; the next lease its completion claimed, if any. */
  private async attemptUntraced(lease: Lease): Promise<Lease | undefined> {
    const stop = new AbortController();
    this.jobs.set(lease.id, stop);
    const halt = (why: StopReason['why'], message: string) => {
      if (!stop.signal.aborted) stop.abort(new StopReason(why, `job ${lease.id}: ${message}`));
    };
    let until = lease.until;
    const heartbeat = setInterval(() => {
      this.client.renew(lease, this.ttl).then(
        (next) => { until = next; },
        (e: unknown) => {
          if (e instanceof LeaseError && e.leaseLost) {
            halt(e.reason === 'cancelled' ? 'cancelled' : 'lost', e.message);
          } else {
            this.report(e);
            if (Date.now() / 1000 >= until) halt('lost', 'its lease ran out while renewals got no answer');
          }
        },
      );
    }, this.renewEvery * 1000);
    const timer = lease.timeout !== null
      ? setTimeout(() => halt('timeout', `timed out after ${lease.timeout} s`), lease.timeout * 1000)
      : undefined;
    try {
      let payload: Buffer | null;
      try {
        payload = this.client.openPayload(lease);
      } catch (e) {
        // A payload that does not open fails the job (retried, so a worker with the key may run it).
        await this.failJob(lease, e instanceof Error ? e.message : String(e));
        return undefined;
      }
      const job = this.jobFor(lease, payload, stop.signal);
      let result: string | void | undefined;
      try {
        result = await Promise.race([Promise.resolve().then(() => this.handler(job)), rejected(stop.signal)]);
      } catch (e) {
        const reason: unknown = stop.signal.reason;
        if (reason instanceof StopReason && reason.why !== 'timeout') {
          if (reason.why === 'draining') await this.client.release(lease).catch((x) => this.report(x));
          this.summary.lost++;
          return undefined;
        }
        const message = reason instanceof StopReason ? 'timed out' : e instanceof Error ? e.message : String(e);
        await this.failJob(lease, message);
        return undefined;
      }
      if (stop.signal.aborted) {
        this.summary.lost++;
        return undefined;
      }
      let text = typeof result === 'string' ? result : '';
      if ((this.options.sealResults || this.client.requireSealed) && this.client.keys !== undefined) {
        text = this.client.keys.sealResult(lease.id, text);
      }
      const more = !this.stopping.signal.aborted && (this.options.maxJobs === undefined || this.started < this.options.maxJobs);
      try {
        const done = await this.client.complete(lease, text, more ? { queue: this.queue, ttl: this.ttl, limit: 1 } : undefined);
        if (done.ok) this.summary.completed++;
        else {
          this.summary.lost++;
          this.report(done.refusal);
        }
        return done.leases[0];
      } catch (e) {
        this.summary.lost++;
        this.report(e);
        return undefined;
      }
    } finally {
      clearInterval(heartbeat);
      if (timer !== undefined) clearTimeout(timer);
      this.jobs.delete(lease.id);
      this.traces.delete(lease.id);
    }
  }

  private async failJob(lease: Lease, error: string): Promise<void> {
    // The attempt's span says it failed, never why: an error's text may quote the payload.
    trace.getActiveSpan()?.setStatus({ code: SpanStatusCode.ERROR });
    try {
      const options: { retry?: boolean; backoff?: components['schemas']['BackoffBody'] } = {};
      if (this.options.retry !== undefined) options.retry = this.options.retry;
      if (this.options.backoff !== undefined) options.backoff = this.options.backoff;
      await this.client.fail(lease, error, options);
      this.summary.failed++;
    } catch (e) {
      this.summary.lost++;
      this.report(e);
    }
  }

  private jobFor(lease: Lease, payload: Buffer | null, signal: AbortSignal): Job {
    const client = this.client;
    const ttl = this.ttl;
    // A worker that seals results seals its progress and checkpoints too (docs/ENCRYPTION.md).
    const sealing = (this.options.sealResults || client.requireSealed) ? client.keys : undefined;
    const known = this.traces.get(lease.id);
    let read: Promise<TraceContext | null> | undefined = known === undefined ? undefined : Promise.resolve(known);
    return {
      id: lease.id,
      fence: lease.fence,
      attempt: lease.attempt,
      group: lease.group,
      payload,
      text: payload === null ? null : payload.toString('utf8'),
      signal,
      lease,
      async progress(text: string) {
        await client.progress(lease, sealing === undefined ? text : sealing.sealProgress(lease.id, text), ttl);
      },
      async checkpoint(name: string, value: string) {
        await client.keepCheckpoint(lease, name, sealing === undefined ? value : sealing.sealCheckpoint(lease.id, name, value));
      },
      async checkpoints() {
        const kept = await client.checkpoints(lease.id);
        return new Map(kept.map((c) => [c.name, openCheckpoint(client.keys, lease.id, c.name, c.value, client.requireSealed)]));
      },
      guardHeaders() {
        return { 'Lease-Job': lease.id, 'Lease-Fence': String(lease.fence) };
      },
      traceContext() {
        // A read that failed is tried again when asked again.
        read ??= client.job(lease.id).then(
          (view) => (view.traceparent ? { traceparent: view.traceparent, tracestate: view.tracestate ?? null } : null),
          (e: unknown) => {
            read = undefined;
            throw e;
          },
        );
        return read;
      },
    };
  }

  private async drainAll(): Promise<void> {
    if (this.running.size === 0) return;
    const drain = (this.options.drain ?? 30) * 1000;
    const all = Promise.all([...this.running]);
    // The drain's timer is cleared when the jobs end first: a pending timer would keep the
    // process alive for the whole drain after its last job.
    const timer = new AbortController();
    const ended = await Promise.race([all.then(() => true), delay(drain, timer.signal).then(() => false)]);
    timer.abort();
    if (!ended) {
      for (const [id, stop] of this.jobs) {
        if (!stop.signal.aborted) stop.abort(new StopReason('draining', `job ${id}: the worker stopped and its drain ran out`));
      }
      await all;
    }
  }
}

function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });
}

function rejected(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    else signal.addEventListener('abort', () => reject(signal.reason), { once: true });
  });
}
