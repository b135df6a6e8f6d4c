/** The client against a live server: every kind of call, and refusals as errors with reasons. */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { LeaseClient, LeaseError } from '../src/index.js';
import { STORES, suiteServer, unique } from './harness.js';

for (const kind of STORES) {
  describe(`the client (${kind})`, () => {
    const s = suiteServer(kind);

    test('a job goes from enqueue through its lease to its result', async () => {
      assert.equal(await s.client.enqueue('mail', { id: 'j1', payload: 'hello', priority: 3 }), true);
      assert.equal(await s.client.enqueue('mail', { id: 'j1', payload: 'again' }), false, 'a second enqueue of an id makes nothing');
      const { leases } = await s.client.claimNext('mail', { ttl: 30, owner: 'ts' });
      assert.equal(leases.length, 1);
      const lease = leases[0]!;
      assert.equal(lease.id, 'j1');
      assert.equal(lease.attempt, 1);
      assert.equal(lease.payload?.toString(), 'hello');
      assert.ok((await s.client.renew(lease, 60)) > lease.until);
      await s.client.progress(lease, '1 of 2');
      await s.client.keepCheckpoint(lease, 'fetch', 'rows=3');
      assert.deepEqual((await s.client.checkpoints('j1')).map((c) => [c.name, c.value, c.fence]), [['fetch', 'rows=3', lease.fence]]);
      assert.equal((await s.client.job('j1')).progress, '1 of 2');
      const done = await s.client.complete(lease, 'sent');
      assert.equal(done.ok, true);
      assert.equal(done.resultFence, lease.fence);
      const job = await s.client.job('j1');
      assert.equal(job.status, 'done');
      assert.equal(job.result, 'sent');
      assert.equal(job.payload, 'hello');
      const { attempts, older } = await s.client.attempts('j1');
      assert.deepEqual(attempts.map((a) => [a.fence, a.owner, a.outcome]), [[lease.fence, 'ts', 'done']]);
      assert.equal(older, 0);
    });

    test('a completion carries the next claim, in the same request', async () => {
      await s.client.enqueueMany('chain', [{ id: 'c1' }, { id: 'c2', payload: new Uint8Array([0, 255, 1]) }]);
      const first = (await s.client.claimNext('chain', { ttl: 30 })).leases[0]!;
      const done = await s.client.complete(first, 'one', { queue: 'chain', ttl: 30 });
      assert.equal(done.ok, true);
      assert.equal(done.leases.length, 1);
      const next = done.leases[0]!;
      assert.equal(next.id, 'c2');
      assert.deepEqual([...next.payload!], [0, 255, 1], 'bytes that are not UTF-8 come back as they went');
      await s.client.complete(next, 'two');
      assert.equal((await s.client.job('c2')).status, 'done');
    });

    test('writes made together go to the server together, each answered on its own', async () => {
      const sizes: number[] = [];
      const counting = new LeaseClient({
        url: s.served.url,
        apiKey: s.served.key,
        keys: null,
        fetch: async (request: Request) => {
          if (new URL(request.url).pathname === '/v1/leases/settle') {
            sizes.push(((await request.clone().json()) as { writes: unknown[] }).writes.length);
          }
          return globalThis.fetch(request);
        },
      });
      await counting.enqueueMany('together', [1, 2, 3, 4, 5, 6].map((n) => ({ id: `t${n}` })));
      const { leases } = await counting.claimNext('together', { ttl: 30, limit: 6 });
      assert.equal(leases.length, 6);
      const stale = { ...leases[5]!, fence: 0 };
      const answers = await Promise.allSettled([
        ...leases.slice(0, 4).map((lease) => counting.complete(lease, `r-${lease.id}`)),
        counting.fail(leases[4]!, 'upstream down', { retry: false }),
        counting.complete(stale, 'late'),
      ]);
      // The first two went at once, alone; the four made while they were out, in one request.
      assert.deepEqual(sizes, [1, 1, 4]);
      for (const answer of answers.slice(0, 4)) assert.equal(answer.status, 'fulfilled');
      assert.deepEqual((answers[4] as PromiseFulfilledResult<unknown>).value, { state: 'dead', run_at: null });
      const refused = answers[5] as PromiseRejectedResult;
      assert.ok(refused.reason instanceof LeaseError && refused.reason.reason === 'stale', String(refused.reason));
      assert.equal((await counting.job('t1')).result, 'r-t1');
      assert.equal((await counting.job('t5')).status, 'dead');
      assert.equal((await counting.job('t6')).status, 'running');
    });

    test('an old lease\'s writes are refused once a newer lease exists, and change nothing', async () => {
      await s.client.enqueue('fence', { id: 'f1' });
      const old = (await s.client.claimNext('fence', { ttl: 30, owner: 'ts/a' })).leases[0]!;
      await s.client.release(old);
      const current = (await s.client.claimNext('fence', { ttl: 30, owner: 'ts/b' })).leases[0]!;
      assert.ok(current.fence > old.fence);
      await assert.rejects(s.client.complete(old, 'stale result'), (e: unknown) => {
        assert.ok(e instanceof LeaseError, String(e));
        assert.ok(e.leaseLost, `a lost lease: ${e.reason}`);
        assert.ok(e.status >= 400 && e.status < 500);
        return true;
      });
      await assert.rejects(s.client.renew(old, 30), (e: unknown) => e instanceof LeaseError && e.leaseLost);
      // The old lease's own token with the new fence is refused too: a lease is its token.
      await assert.rejects(s.client.complete({ ...old, fence: current.fence }, 'stale result'), (e: unknown) => e instanceof LeaseError);
      const job = await s.client.job('f1');
      assert.equal(job.result ?? null, null);
      assert.equal(job.fence, current.fence);
      await s.client.complete(current, 'fresh');
      assert.equal((await s.client.job('f1')).result, 'fresh');
    });

    test('jobs are listed by group and by the start of their id', async () => {
      await s.client.enqueueMany('grouped', [
        { id: 'g-inv-1', extra: { group: 'acme' } },
        { id: 'g-inv-2', extra: { group: 'zeta' } },
        { id: 'g-pay-1', extra: { group: 'acme' } },
      ]);
      const ids = async (query: { group?: string; prefix?: string }) =>
        (await s.client.jobs({ queue: 'grouped', ...query })).jobs.map((job) => job.id);
      assert.deepEqual(await ids({ group: 'acme' }), ['g-inv-1', 'g-pay-1']);
      assert.deepEqual(await ids({ prefix: 'g-inv' }), ['g-inv-1', 'g-inv-2']);
      assert.deepEqual(await ids({ group: 'acme', prefix: 'g-inv' }), ['g-inv-1']);
      await assert.rejects(s.client.jobs({ group: '' }), (e: unknown) => e instanceof LeaseError && e.status === 422 && /group/.test(e.message));
    });

    test('an admin retries every dead job of a group in one call, after a dry run counts them', async () => {
      await s.client.enqueueMany('bulk', [
        { id: 'b-1', extra: { group: 'acme' } },
        { id: 'b-2', extra: { group: 'acme' } },
        { id: 'b-3', extra: { group: 'zeta' } },
      ]);
      const { leases } = await s.client.claimNext('bulk', { ttl: 30, limit: 3 });
      for (const lease of leases) await s.client.fail(lease, 'boom', { retry: false });
      const filter = { action: 'retry' as const, queue: 'bulk', group: 'acme' };
      assert.deepEqual(await s.client.bulk({ ...filter, dry_run: true }), { action: 'retry', matched: 2, changed: 0, dry_run: true });
      assert.deepEqual(await s.client.bulk(filter), { action: 'retry', matched: 2, changed: 2, dry_run: false });
      assert.equal((await s.client.job('b-1')).status, 'pending');
      assert.equal((await s.client.job('b-3')).status, 'dead');
    });

    test('bad input is refused with a reason naming the problem, and stores nothing', async () => {
      const before = (await s.client.jobs({ queue: 'bad' })).jobs.length;
      await assert.rejects(s.client.enqueue('bad', { id: '' }), (e: unknown) => {
        assert.ok(e instanceof LeaseError);
        assert.equal(e.status, 422);
        assert.equal(e.reason, 'invalid');
        assert.match(e.message, /field `id` must not be empty/);
        return true;
      });
      await assert.rejects(s.client.claimNext('bad', { ttl: -1 }), (e: unknown) => e instanceof LeaseError && e.reason === 'invalid' && /ttl/.test(e.message));
      await assert.rejects(s.client.job('no-such-job'), (e: unknown) => e instanceof LeaseError && e.reason === 'not_found');
      assert.equal((await s.client.jobs({ queue: 'bad' })).jobs.length, before);
    });

    test('a wrong key is refused as unauthorized', async () => {
      const stranger = new LeaseClient({ url: s.served.url, apiKey: 'lease_not-a-key', keys: null });
      await assert.rejects(stranger.stats(), (e: unknown) => e instanceof LeaseError && e.status === 401 && e.reason === 'unauthorized');
    });

    test('a dead job is cancelled, keeping its error, and frees its ordered group', async () => {
      const queue = unique('dead');
      await s.client.enqueue(queue, { id: 'd1', extra: { group: 'acct' } });
      await s.client.enqueue(queue, { id: 'd2', extra: { group: 'acct' } });
      await s.client.setLimits(queue, { ordered: true });
      const [held] = (await s.client.claimNext(queue, { ttl: 30 })).leases;
      assert.ok(held);
      await s.client.fail(held, 'bad invoice', { retry: false });
      assert.equal((await s.client.job('d1')).status, 'dead');
      assert.equal((await s.client.claimNext(queue, { ttl: 30 })).leases.length, 0, 'the dead job holds its group');
      await s.client.cancel('d1');
      const ended = await s.client.job('d1');
      assert.equal(ended.status, 'cancelled');
      assert.equal(ended.error, 'bad invoice');
      await assert.rejects(s.client.cancel('d1'), (e: unknown) => e instanceof LeaseError && e.reason === 'cancelled');
      assert.deepEqual((await s.client.claimNext(queue, { ttl: 30 })).leases.map((l) => l.id), ['d2']);
    });

    test('the admin and overview routes answer', async () => {
      await s.client.enqueue('admin', { id: 'a1' });
      await s.client.enqueue('admin', { id: 'a2' });
      await s.client.cancel('a2');
      assert.equal((await s.client.job('a2')).status, 'cancelled');
      await s.client.retry('a2');
      assert.equal((await s.client.job('a2')).status, 'pending');
      const paused = await s.client.pause('admin');
      assert.ok(paused.paused);
      assert.equal((await s.client.claimNext('admin', { ttl: 30 })).leases.length, 0, 'a paused queue leases nothing');
      await s.client.resume('admin');
      await s.client.setLimits('admin', { concurrency: 1 });
      assert.equal((await s.client.limits('admin')).concurrency, 1);
      const got = await s.client.claimNext('admin', { ttl: 30, limit: 2 });
      assert.equal(got.leases.length, 1, 'the limit of 1 holds');
      assert.ok((await s.client.queues()).queues.some((q) => q.queue === 'admin'));
      assert.ok('admin' in (await s.client.stats()).queues);
      assert.match(await s.client.metrics(), /lease_/);
      assert.equal((await s.client.health()).ok, true);
      await s.client.throttle('admin');
      await s.client.groups('admin');
      await s.client.activity(5);
      await s.client.refusals({});
      await s.client.children('a1');
      await s.client.schedules();
      await s.client.enqueue('flow', { id: 'g1' });
      await s.client.enqueue('flow', { id: 'g2', extra: { after: ['g1'] } });
      const graph = await s.client.graph('g2', { limit: 10 });
      assert.deepEqual(graph.nodes.map((n) => [n.id, n.status]), [['g2', 'waiting'], ['g1', 'pending']]);
      assert.deepEqual(graph.edges, [{ parent: 'g1', child: 'g2' }]);
      assert.equal(graph.more, 0);
    });
  });
}
