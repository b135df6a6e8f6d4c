/**
 * Traces across the queue with a TypeScript producer and worker, as a collector sees them: a
 * real OTLP/HTTP receiver in the test decodes the protobuf that `lease serve`, `lease work`
 * and the TypeScript SDK export. One trace runs from the producer's span through the server's
 * span of its enqueue, the TypeScript worker's attempt, the job it enqueues from its handler, to
 * the `lease work` attempt that runs that job and its program's `TRACEPARENT`.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { gunzipSync } from 'node:zlib';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { trace } from '@opentelemetry/api';
import { NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { LeaseClient, Worker } from '../src/index.js';
import { promisify } from 'node:util';
import { execFile } from 'node:child_process';
import { LEASE_BIN, STORES, Served, unique } from './harness.js';

const run = promisify(execFile);

const SECRET = 'payload-that-must-not-be-traced';

/** A span as OTLP carries it, the fields the test reads. */
interface Span {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Map<string, string | number>;
  links: { traceId: string; spanId: string }[];
}

/** Protobuf's wire format, enough to read an `ExportTraceServiceRequest`: each field of a
 * message by number, a length-delimited one as its bytes and a varint as a number. */
function fields(bytes: Buffer): Map<number, (Buffer | number)[]> {
  const out = new Map<number, (Buffer | number)[]>();
  let at = 0;
  const varint = (): number => {
    let value = 0;
    let scale = 1;
    for (;;) {
      const byte = bytes[at++] as number;
      value += (byte & 0x7f) * scale;
      scale *= 128;
      if ((byte & 0x80) === 0) return value;
    }
  };
  while (at < bytes.length) {
    const key = varint();
    const [field, wire] = [Math.floor(key / 8), key & 7];
    let value: Buffer | number;
    if (wire === 0) value = varint();
    else if (wire === 1) { value = 0; at += 8; }
    else if (wire === 5) { value = 0; at += 4; }
    else if (wire === 2) { const n = varint(); value = bytes.subarray(at, at + n); at += n; }
    else throw new Error(`wire type ${wire} is not read here`);
    out.set(field, [...(out.get(field) ?? []), value]);
  }
  return out;
}

const all = (m: Map<number, (Buffer | number)[]>, n: number): Buffer[] => (m.get(n) ?? []) as Buffer[];
const hex = (m: Map<number, (Buffer | number)[]>, n: number): string => (all(m, n)[0] ?? Buffer.alloc(0)).toString('hex');

function spansOf(body: Buffer): Span[] {
  const spans: Span[] = [];
  for (const resource of all(fields(body), 1)) {
    for (const scope of all(fields(resource), 2)) {
      for (const raw of all(fields(scope), 2)) {
        const span = fields(raw);
        const attributes = new Map<string, string | number>();
        for (const kv of all(span, 9)) {
          const pair = fields(kv);
          const value = fields(all(pair, 2)[0] ?? Buffer.alloc(0));
          const text = all(value, 1)[0];
          const int = value.get(3)?.[0];
          attributes.set(all(pair, 1)[0]?.toString('utf8') ?? '', text !== undefined ? text.toString('utf8') : (int as number));
        }
        spans.push({
          traceId: hex(span, 1),
          spanId: hex(span, 2),
          parentSpanId: hex(span, 4),
          name: all(span, 5)[0]?.toString('utf8') ?? '',
          kind: (span.get(6)?.[0] as number | undefined) ?? 0,
          attributes,
          links: all(span, 13).map((l) => { const link = fields(l); return { traceId: hex(link, 1), spanId: hex(link, 2) }; }),
        });
      }
    }
  }
  return spans;
}

/** An OTLP/HTTP receiver: every `POST /v1/traces` body decoded, its spans and bytes kept. */
class Receiver {
  readonly spans: Span[] = [];
  raw = '';
  private constructor(private readonly server: Server, readonly url: string) {}

  static async start(): Promise<Receiver> {
    let receiver: Receiver | undefined;
    const server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (c: Buffer) => chunks.push(c));
      request.on('end', () => {
        let body = Buffer.concat(chunks);
        if (request.headers['content-encoding'] === 'gzip') body = gunzipSync(body);
        assert.equal(request.url, '/v1/traces');
        receiver!.raw += body.toString('latin1');
        receiver!.spans.push(...spansOf(body));
        response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
      });
    });
    // Exporters keep their connection between batches: the receiver keeps it open as long as
    // a test runs, so a batch never meets a connection closed under it.
    server.keepAliveTimeout = 120_000;
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
    const address = server.address();
    if (address === null || typeof address === 'string') throw new Error('no address');
    receiver = new Receiver(server, `http://127.0.0.1:${address.port}`);
    return receiver;
  }

  close(): void {
    this.server.close();
  }
}

describe('traces', () => {
  let receiver: Receiver;
  let provider: NodeTracerProvider;

  before(async () => {
    receiver = await Receiver.start();
    provider = new NodeTracerProvider({
      spanProcessors: [new SimpleSpanProcessor(new OTLPTraceExporter({ url: `${receiver.url}/v1/traces` }))],
    });
    provider.register();
  });

  after(async () => {
    await provider.shutdown();
    receiver.close();
  });

  for (const kind of STORES) {
    test(`${kind}: one trace from a TypeScript enqueue through a TypeScript worker to a lease work program`, async () => {
      const served = await Served.start(kind, ['--otlp-endpoint', receiver.url]);
      const dir = mkdtempSync(join(tmpdir(), 'lease-ts-trace-'));
      let stopped = false;
      try {
        const client = new LeaseClient({ url: served.url, apiKey: served.key, keys: null });
        const [first, second, a, b] = [unique('ts'), unique('sh'), unique('a'), unique('b')];
        const tracer = trace.getTracer('lease-test');
        const produced = await tracer.startActiveSpan('produce', async (span) => {
          await client.enqueue(first, { id: a, payload: SECRET });
          span.end();
          return span.spanContext();
        });
        // The TypeScript worker's handler enqueues the next job from inside its attempt.
        const worker = new Worker(client, async () => {
          await client.enqueue(second, { id: b, payload: SECRET });
          return `done-${SECRET}`;
        }, { queue: first, owner: 'ts-w', maxJobs: 1, handleSignals: false, tracer });
        assert.deepEqual(await worker.run(), { completed: 1, failed: 0, lost: 0 });
        const seen = join(dir, 'seen');
        // Run beside the receiver, never blocking this process's event loop, which it answers on.
        await run(LEASE_BIN, ['--server', served.url, 'work', '--queue', second, '--owner', 'sh-w', '--ttl', '30', '--max-jobs', '1',
          '--otlp-endpoint', receiver.url, '--', 'sh', '-c', `echo "$TRACEPARENT" > ${seen}`], { env: { ...process.env, LEASE_API_KEY: served.key } });
        await provider.forceFlush();
        stopped = true;
        await served.stop();

        const spans = receiver.spans.filter((s) => s.traceId === produced.traceId);
        const one = (what: string, found: Span | undefined): Span => {
          assert.ok(found, `${what} is in the producer's trace: ${spans.map((s) => s.name).join(', ')}`);
          return found;
        };
        // The server's span of the enqueue is a child of the producer's span.
        const enqueue = one('the enqueue request', spans.find((s) => s.name === 'POST /v1/queues/{queue}/jobs' && s.parentSpanId === produced.spanId));
        assert.equal(enqueue.attributes.get('http.response.status_code'), 201);
        // The TypeScript worker's attempt continues the producer's trace.
        const ts = one('the TypeScript attempt', spans.find((s) => s.name === 'lease.attempt' && s.attributes.get('job') === a));
        assert.equal(ts.parentSpanId, produced.spanId);
        assert.equal(ts.kind, 5, 'a consumer span');
        assert.equal(ts.attributes.get('fence'), 1);
        // Its report is a request in its trace: the server's span of the completion is its child.
        one('the completion', spans.find((s) => s.name === 'POST /v1/leases/settle' && s.parentSpanId === ts.spanId));
        // The job its handler enqueued runs under `lease work` as a child of that attempt ...
        const rust = one('the lease work attempt', spans.find((s) => s.name === 'lease.attempt' && s.attributes.get('job') === b));
        assert.equal(rust.parentSpanId, ts.spanId);
        // ... whose program got its span as TRACEPARENT.
        assert.equal(readFileSync(seen, 'utf8').trim(), `00-${produced.traceId}-${rust.spanId}-01`);
        // No exported byte holds a payload or a result.
        assert.ok(!receiver.raw.includes(SECRET), 'an exported span holds a payload or a result');
      } finally {
        if (!stopped) await served.stop();
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }

  for (const kind of STORES) {
    test(`${kind}: a worker without a tracer still gives its handler the job's trace context`, async () => {
      const served = await Served.start(kind);
      try {
        const client = new LeaseClient({ url: served.url, apiKey: served.key, keys: null });
        const queue = unique('untraced');
        const parent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
        await client.enqueue(queue, { id: 'traced', extra: { traceparent: parent } });
        await client.enqueue(queue, { id: 'plain' });
        const seen = new Map<string, unknown>();
        const worker = new Worker(client, async (job) => {
          seen.set(job.id, await job.traceContext());
          // Asked twice, read once: the same answer.
          assert.deepEqual(await job.traceContext(), seen.get(job.id));
        }, { queue, owner: 'w', maxJobs: 2, handleSignals: false });
        assert.deepEqual(await worker.run(), { completed: 2, failed: 0, lost: 0 });
        assert.deepEqual(seen.get('traced'), { traceparent: parent, tracestate: null });
        assert.equal(seen.get('plain'), null);
      } finally {
        await served.stop();
      }
    });
  }

  test('a retry is a trace of its own, linked to the enqueuing span', async () => {
    const served = await Served.start('sqlite');
    try {
      const client = new LeaseClient({ url: served.url, apiKey: served.key, keys: null });
      const queue = unique('retry');
      const tracer = trace.getTracer('lease-test');
      const produced = await tracer.startActiveSpan('produce-retry', async (span) => {
        await client.enqueue(queue, { id: 'r', maxAttempts: 2 });
        span.end();
        return span.spanContext();
      });
      let runs = 0;
      const worker = new Worker(client, () => {
        runs++;
        if (runs === 1) throw new Error('first attempt fails');
        return 'ok';
      }, { queue, owner: 'w', maxJobs: 2, handleSignals: false, tracer, backoff: { base: 0.01, factor: 1, max: 0.01, jitter: 0 } });
      assert.deepEqual(await worker.run(), { completed: 1, failed: 1, lost: 0 });
      await provider.forceFlush();
      const attempts = receiver.spans.filter((s) => s.name === 'lease.attempt' && s.attributes.get('queue') === queue);
      const [first, retry] = [1, 2].map((n) => attempts.find((s) => s.attributes.get('attempt') === n));
      assert.ok(first && retry, 'a span for each attempt');
      assert.equal(first.traceId, produced.traceId);
      assert.equal(first.parentSpanId, produced.spanId);
      assert.notEqual(retry.traceId, produced.traceId);
      assert.equal(retry.parentSpanId, '');
      assert.deepEqual(retry.links, [{ traceId: produced.traceId, spanId: produced.spanId }]);
    } finally {
      await served.stop();
    }
  });
});
