/** The Worker against a live server: runs, failures, stops (cancel, lost lease, timeout), and a drain on SIGTERM. */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { LeaseClient, StopReason, Worker, type Job } from '../src/index.js';
import { PACKAGE, STORES, eventually, suiteServer } from './harness.js';

const quiet = { handleSignals: false, wait: 1 } as const;

for (const kind of STORES) {
  describe(`the Worker (${kind})`, () => {
    const s = suiteServer(kind);

    test('runs every job once, concurrently, each completion claiming the next', async () => {
      const ids = Array.from({ length: 12 }, (_, i) => `run-${i}`);
      await s.client.enqueueMany('run', ids.map((id) => ({ id, payload: id })));
      let claims = 0;
      const counting = new LeaseClient({
        url: s.served.url,
        apiKey: s.served.key,
        keys: null,
        fetch: (r) => {
          if (r.url.endsWith('/claims')) claims++;
          return fetch(r);
        },
      });
      const seen: string[] = [];
      let running = 0;
      let most = 0;
      const summary = await new Worker(
        counting,
        async (job) => {
          running++;
          most = Math.max(most, running);
          seen.push(job.id);
          await new Promise((ok) => setTimeout(ok, 20));
          running--;
          return `did ${job.text}`;
        },
        { ...quiet, queue: 'run', concurrency: 3, exitWhenEmpty: true },
      ).run();
      assert.deepEqual(summary, { completed: 12, failed: 0, lost: 0 });
      assert.deepEqual([...seen].sort(), [...ids].sort(), 'each job ran exactly once');
      assert.ok(most <= 3, `at most 3 at once, saw ${most}`);
      assert.ok(most > 1, 'jobs ran concurrently');
      assert.ok(claims < 12, `completions carried the next claims (${claims} claim requests for 12 jobs)`);
      for (const id of ids) assert.equal((await s.client.job(id)).result, `did ${id}`);
    });

    test('a handler that throws fails the job with its message; retries run until the attempts are spent', async () => {
      await s.client.enqueue('fails', { id: 'boom', maxAttempts: 2 });
      const attempts: number[] = [];
      const summary = await new Worker(
        s.client,
        (job) => {
          attempts.push(job.attempt);
          throw new Error(`upstream said no on attempt ${job.attempt}`);
        },
        { ...quiet, queue: 'fails', exitWhenEmpty: false, maxJobs: 2, backoff: { base: 0.01, factor: 1, max: 0.01, jitter: 0 } },
      ).run();
      assert.deepEqual(summary, { completed: 0, failed: 2, lost: 0 });
      assert.deepEqual(attempts, [1, 2]);
      const job = await s.client.job('boom');
      assert.equal(job.status, 'dead');
      assert.equal(job.error, 'upstream said no on attempt 2');
    });

    test('cancelling a running job fires its signal, and nothing is stored for it', async () => {
      await s.client.enqueue('cancel', { id: 'long' });
      let reason: unknown;
      const worker = new Worker(
        s.client,
        async (job) => {
          await new Promise<void>((ok) => job.signal.addEventListener('abort', () => ok(), { once: true }));
          reason = job.signal.reason;
          return 'must not be stored';
        },
        { ...quiet, queue: 'cancel', ttl: 3, maxJobs: 1 },
      );
      const run = worker.run();
      await eventually('the job runs', async () => ((await s.client.job('long')).status === 'running' ? true : undefined));
      await s.client.cancel('long');
      const summary = await run;
      assert.ok(reason instanceof StopReason);
      assert.equal(reason.why, 'cancelled');
      assert.deepEqual(summary, { completed: 0, failed: 0, lost: 1 });
      const job = await s.client.job('long');
      assert.equal(job.status, 'cancelled');
      assert.equal(job.result ?? null, null);
    });

    test('a worker cut off from the server stops its job when its lease runs out, and another completes it', async () => {
      await s.client.enqueue('cut', { id: 'partitioned' });
      let cut = false;
      const stalled = new LeaseClient({
        url: s.served.url,
        apiKey: s.served.key,
        keys: null,
        retries: 0,
        fetch: (r) => (cut ? Promise.reject(new Error('network is unreachable')) : fetch(r)),
      });
      let reason: unknown;
      const first = new Worker(
        stalled,
        async (job) => {
          cut = true;
          await new Promise<void>((ok) => job.signal.addEventListener('abort', () => ok(), { once: true }));
          reason = job.signal.reason;
          return 'late';
        },
        { ...quiet, queue: 'cut', ttl: 1, maxJobs: 1 },
      ).run();
      const summary = await first;
      assert.ok(reason instanceof StopReason);
      assert.equal(reason.why, 'lost');
      assert.deepEqual(summary, { completed: 0, failed: 0, lost: 1 });
      const second = await new Worker(s.client, () => 'on time', { ...quiet, queue: 'cut', maxJobs: 1 }).run();
      assert.equal(second.completed, 1);
      const job = await s.client.job('partitioned');
      assert.equal(job.result, 'on time');
      assert.equal(job.attempts, 2);
    });

    test('a job past its timeout is stopped and failed as timed out', async () => {
      await s.client.enqueue('slow', { id: 'slow', maxAttempts: 1, extra: { timeout: 0.3 } });
      let reason: unknown;
      const summary = await new Worker(
        s.client,
        async (job) => {
          await new Promise<void>((ok) => job.signal.addEventListener('abort', () => ok(), { once: true }));
          reason = job.signal.reason;
          return 'too late';
        },
        { ...quiet, queue: 'slow', maxJobs: 1 },
      ).run();
      assert.ok(reason instanceof StopReason && reason.why === 'timeout');
      assert.deepEqual(summary, { completed: 0, failed: 1, lost: 0 });
      const job = await s.client.job('slow');
      assert.equal(job.status, 'dead');
      assert.equal(job.error, 'timed out');
    });

    test('a handler reaches a guarded HTTP resource with Lease-Job and Lease-Fence', async () => {
      const heard: Array<[string | undefined, string | undefined]> = [];
      const resource = createServer((req, res) => {
        heard.push([req.headers['lease-job'] as string | undefined, req.headers['lease-fence'] as string | undefined]);
        res.end('ok');
      });
      await new Promise<void>((ok) => resource.listen(0, '127.0.0.1', ok));
      const port = (resource.address() as { port: number }).port;
      try {
        await s.client.enqueue('guarded', { id: 'g1' });
        let fence = 0;
        await new Worker(
          s.client,
          async (job: Job) => {
            fence = job.fence;
            await fetch(`http://127.0.0.1:${port}/thing`, { method: 'PUT', headers: job.guardHeaders(), body: 'x' });
            return 'written';
          },
          { ...quiet, queue: 'guarded', maxJobs: 1 },
        ).run();
        assert.deepEqual(heard, [['g1', String(fence)]]);
        assert.ok(fence > 0);
      } finally {
        resource.close();
      }
    });

    test('progress and checkpoints from a handler are stored under its lease', async () => {
      await s.client.enqueue('steps', { id: 's1' });
      await new Worker(
        s.client,
        async (job) => {
          await job.progress('half');
          await job.checkpoint('first', 'one');
          assert.deepEqual([...(await job.checkpoints())], [['first', 'one']]);
          return 'ok';
        },
        { ...quiet, queue: 'steps', maxJobs: 1 },
      ).run();
      const [checkpoint] = await s.client.checkpoints('s1');
      assert.equal(checkpoint?.value, 'one');
      assert.equal(checkpoint?.fence, (await s.client.job('s1')).fence);
    });

    test('bad options are refused before anything is claimed', async () => {
      await s.client.enqueue('untouched', { id: 'u1' });
      assert.throws(() => new Worker(s.client, () => 'x', { queue: 'untouched', ttl: 0 }), /ttl/);
      assert.throws(() => new Worker(s.client, () => 'x', { queue: 'untouched', concurrency: 0 }), /concurrency/);
      assert.throws(() => new Worker(s.client, () => 'x', { queue: 'untouched', sealResults: true }), /sealResults: needs a key/);
      assert.equal((await s.client.job('u1')).status, 'pending');
      assert.equal((await s.client.job('u1')).attempts, 0);
    });

    test('SIGTERM drains: the running job finishes and stores its result, then the process exits', async () => {
      await s.client.enqueue('drain', { id: 'd1', payload: 'finish me' });
      const child = spawn(process.execPath, [join(PACKAGE, 'dist/examples/worker.js'), 'drain'], {
        env: { ...process.env, LEASE_SERVER: s.served.url, LEASE_API_KEY: s.served.key, LEASE_EXAMPLE_WORK_MS: '1500' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      let said = '';
      child.stdout.on('data', (d: Buffer) => { out += d.toString(); });
      child.stderr.on('data', (d: Buffer) => { said += d.toString(); });
      const exited = new Promise<number | null>((ok) => child.on('exit', ok));
      await eventually('the job runs', async () => ((await s.client.job('d1')).progress === 'started' ? true : undefined));
      const stopped = Date.now();
      child.kill('SIGTERM');
      // A job enqueued once the worker has heard the signal (not before: the claim in flight
      // could take it first, as it may any job that was due when the worker stopped).
      await eventually('the worker hears SIGTERM', async () => (said.includes('stopping (SIGTERM)') ? true : undefined));
      await s.client.enqueue('drain', { id: 'd2', payload: 'not started' });
      assert.equal(await exited, 0);
      // The job's 1.5 s and the claim in flight's wait (5 s), not the 30 s drain: a drain ends
      // with its last job.
      assert.ok(Date.now() - stopped < 15_000, `exited ${Date.now() - stopped} ms after SIGTERM`);
      assert.deepEqual(JSON.parse(out), { completed: 1, failed: 0, lost: 0 });
      const done = await s.client.job('d1');
      assert.equal(done.status, 'done');
      assert.equal(done.result, 'FINISH ME');
      const waiting = await s.client.job('d2');
      assert.equal(waiting.status, 'pending', 'a stopping worker claims nothing new');
      assert.equal(waiting.attempts, 0);
    });
  });
}
