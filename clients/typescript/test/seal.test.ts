/** Sealed payloads and results (docs/ENCRYPTION.md) from TypeScript, and across languages with the `lease` CLI. */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  Keyring, LeaseClient, SealError, Worker, openCheckpoint, openPayload, openProgress, openResult, payloadEnvelope, requireSealedFromEnv,
  resultEnvelope, sealedPayloadKey,
  sealedResultKey,
} from '../src/index.js';
import { Served, STORES, lease } from './harness.js';

const SECRET = 'card 4111-1111-1111-1111 for ada@example.com';

describe('sealing (no server)', () => {
  const key = randomBytes(32);
  const keys = Keyring.single(key);

  test('a single key is named from its SHA-256, and a payload opens only for its own job', () => {
    assert.match(keys.sealingKey, /^key-[0-9a-f]{8}$/);
    const sealed = keys.sealPayload('job-1', SECRET);
    assert.equal(sealedPayloadKey(sealed), keys.sealingKey);
    assert.ok(!sealed.toString('latin1').includes(SECRET));
    assert.equal(openPayload(keys, 'job-1', sealed).toString(), SECRET);
    assert.throws(() => openPayload(keys, 'job-2', sealed), (e: unknown) => e instanceof SealError && /job job-2/.test(e.message) && !e.message.includes(SECRET));
    const changed = Buffer.from(sealed);
    changed.writeUInt8(changed.readUInt8(changed.length - 20) ^ 1, changed.length - 20);
    assert.throws(() => openPayload(keys, 'job-1', changed), SealError);
    assert.throws(() => openPayload(undefined, 'job-1', sealed), /no key was given/);
  });

  test('a result opens as a result of its job, never as a payload', () => {
    const sealed = keys.sealResult('job-1', SECRET);
    assert.equal(sealedResultKey(sealed), keys.sealingKey);
    assert.equal(openResult(keys, 'job-1', sealed), SECRET);
    const body = Buffer.from(sealed.split(':').pop()!, 'base64');
    const asPayload = Buffer.concat([Buffer.from([0xff, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x01, keys.sealingKey.length]), Buffer.from(keys.sealingKey), body]);
    assert.throws(() => openPayload(keys, 'job-1', asPayload), SealError);
    assert.equal(openResult(keys, 'job-1', 'plain text'), 'plain text', 'a plain result passes through');
  });

  test('the envelopes\' starts are reserved: a crafted one of an unknown version or cut short fails clearly, as in Rust', () => {
    const sealed = keys.sealPayload('j', SECRET);
    const later = Buffer.from(sealed);
    later[6] = 2;
    const name = keys.sealingKey.length;
    const cut = sealed.subarray(0, 8 + name + 20);
    const bare = Buffer.from([0xff, 0x6c, 0x65, 0x61, 0x73, 0x65]);
    for (const [crafted, why] of [[later, /version/], [cut, /shorter than a nonce and a tag/], [bare, /no version/]] as const) {
      assert.equal(payloadEnvelope(crafted).kind, 'malformed');
      for (const given of [undefined, keys]) {
        assert.throws(() => openPayload(given, 'j', crafted), (e: unknown) => e instanceof SealError && /not a well-formed sealed payload/.test(e.message) && why.test(e.message));
      }
    }
    assert.equal(payloadEnvelope(Buffer.from([0xff, 0x6c, 0x61])).kind, 'plain', 'bytes that merely start with 0xFF are plain');
    const result = keys.sealResult('j', 'done');
    for (const crafted of [result.replace('lease-sealed:v1:', 'lease-sealed:v2:'), 'lease-sealed:', 'lease-sealed:v1:k:AAAA']) {
      assert.equal(resultEnvelope(crafted).kind, 'malformed', crafted);
      assert.throws(() => openResult(keys, 'j', crafted), /not a well-formed sealed result/);
    }
  });

  test('where sealed values are required a plain value is refused, and a client without a key enqueues nothing', async () => {
    assert.throws(() => openPayload(keys, 'swapped', Buffer.from('to=mallory'), true), /job swapped is not sealed.*LEASE_REQUIRE_SEALED/);
    assert.throws(() => openResult(keys, 'swapped', 'forged', true), /not sealed/);
    assert.equal(openPayload(keys, 'j', keys.sealPayload('j', SECRET), true).toString(), SECRET);
    assert.equal(requireSealedFromEnv({ LEASE_REQUIRE_SEALED: 'yes' }), true);
    assert.equal(requireSealedFromEnv({}), false);
    assert.throws(() => requireSealedFromEnv({ LEASE_REQUIRE_SEALED: 'ture' }), /LEASE_REQUIRE_SEALED must be/);
    let sent = 0;
    const client = new LeaseClient({ url: 'http://127.0.0.1:9', keys: null, requireSealed: true, fetch: async () => { sent++; throw new Error('not sent'); } });
    await assert.rejects(client.enqueue('q', { id: 'clear', payload: SECRET }), (e: unknown) => e instanceof SealError && /LEASE_REQUIRE_SEALED/.test(e.message));
    assert.equal(sent, 0, 'nothing was sent');
    assert.throws(() => new Worker(client, () => 'x', { handleSignals: false }), /requireSealed: needs a key/);
  });

  test('a key file rotates: the last line seals, any line opens; bad files are named, never their keys', () => {
    const dir = mkdtempSync(join(tmpdir(), 'lease-ts-keys-'));
    const old = randomBytes(32).toString('base64');
    const now = randomBytes(32).toString('base64');
    const oldRing = Keyring.parse(`old=${old}\n`, 'f');
    const file = join(dir, 'keys');
    writeFileSync(file, `# rotated\nold=${old}\n\nnew=${now}\n`);
    const ring = Keyring.fromEnv({ LEASE_PAYLOAD_KEY_FILE: file })!;
    assert.deepEqual(ring.names, ['old', 'new']);
    assert.equal(ring.sealingKey, 'new');
    assert.equal(openPayload(ring, 'j', oldRing.sealPayload('j', 'x')).toString(), 'x');
    writeFileSync(file, `bad=${now.slice(1)}\n`);
    assert.throws(() => Keyring.fromEnv({ LEASE_PAYLOAD_KEY_FILE: file }), (e: unknown) => e instanceof SealError && e.message.includes('line 1') && !e.message.includes(now.slice(1)));
    assert.throws(() => Keyring.fromEnv({ LEASE_PAYLOAD_KEY: 'short' }), /LEASE_PAYLOAD_KEY: a key must be 32 bytes/);
    assert.throws(() => Keyring.fromEnv({ LEASE_PAYLOAD_KEY: now, LEASE_PAYLOAD_KEY_FILE: file }), /not both/);
    assert.equal(Keyring.fromEnv({}), undefined);
    assert.equal(Keyring.fromEnv({ LEASE_PAYLOAD_KEY: '', LEASE_PAYLOAD_KEY_FILE: '' }), undefined, 'empty variables count as unset, as in Rust');
  });
});

for (const kind of STORES) {
  describe(`sealed jobs through lease serve (${kind})`, () => {
    let served: Served;
    const keyText = randomBytes(32).toString('base64');
    const keys = Keyring.single(Buffer.from(keyText, 'base64'));
    const env = () => ({ LEASE_SERVER: served.url, LEASE_API_KEY: served.key, LEASE_PAYLOAD_KEY: keyText });
    before(async () => {
      served = await Served.start(kind);
    });
    after(async () => served.stop());

    test('a payload and result sealed in TypeScript: the server and its store hold no plaintext, the worker reads it', async () => {
      const client = new LeaseClient({ url: served.url, apiKey: served.key, keys });
      await client.enqueue('sealed', { id: 'secret-1', payload: SECRET });
      const view = await client.job('secret-1');
      assert.equal(view.payload ?? null, null);
      assert.deepEqual(view.payload_encrypted, { key: keys.sealingKey });
      let seen: string | null = null;
      await new Worker(client, (job) => { seen = job.text; return `${SECRET} (done)`; }, { queue: 'sealed', maxJobs: 1, sealResults: true, handleSignals: false }).run();
      assert.equal(seen, SECRET);
      const done = await client.job('secret-1');
      assert.deepEqual(done.result_encrypted, { key: keys.sealingKey });
      assert.equal(openResult(keys, 'secret-1', done.result!), `${SECRET} (done)`);
      assert.ok(!served.dump().includes('4111-1111'), 'the store holds no plaintext');
      const state = lease(['state', 'secret-1', '--json'], env());
      assert.ok(!state.includes('4111-1111'), 'lease state shows no plaintext');
    });

    test('with sealResults, progress and checkpoints are stored sealed, and a lease work retry reads the checkpoint opened', async () => {
      const client = new LeaseClient({ url: served.url, apiKey: served.key, keys });
      await client.enqueue('steps', { id: 'steps-1', payload: 'p', maxAttempts: 2 });
      let progress: string | null | undefined;
      const worker = new Worker(client, async (job) => {
        await job.checkpoint('fetch', `${SECRET} rows`);
        await job.progress(`${SECRET} halfway ${'x'.repeat(2000)}`);
        progress = (await client.job(job.id)).progress;
        assert.equal((await job.checkpoints()).get('fetch'), `${SECRET} rows`, 'read back opened');
        throw new Error('first attempt fails');
      }, { queue: 'steps', maxJobs: 1, sealResults: true, handleSignals: false, backoff: { base: 0.01, factor: 1, max: 0.01, jitter: 0 } });
      assert.deepEqual(await worker.run(), { completed: 0, failed: 1, lost: 0 });
      assert.ok(progress?.startsWith(`lease-sealed:v1:${keys.sealingKey}:`), progress ?? `no progress: ${(await client.job('steps-1')).error}`);
      assert.ok(Buffer.byteLength(progress!) <= 256);
      assert.ok(openProgress(keys, 'steps-1', progress!).startsWith(`${SECRET} halfway xxx`));
      const [kept] = await client.checkpoints('steps-1');
      assert.equal(openCheckpoint(keys, 'steps-1', 'fetch', kept!.value), `${SECRET} rows`);
      assert.throws(() => openCheckpoint(keys, 'steps-1', 'parse', kept!.value), SealError);
      assert.ok(!served.dump().includes('4111-1111'), 'the store holds no plaintext');
      // Rust reads what TypeScript sealed: lease work's retry gets the step opened.
      lease(['work', '--queue', 'steps', '--owner', 'sh', '--ttl', '30', '--max-jobs', '1', '--', 'sh', '-c', 'cat "$LEASE_CHECKPOINTS_FILE"'], env());
      const done = await client.job('steps-1');
      assert.deepEqual(JSON.parse(done.result ?? ''), { fetch: `${SECRET} rows` });
    });

    test('a payload sealed by the lease CLI opens in a TypeScript worker, and one sealed in TypeScript opens for the CLI', async () => {
      lease(['enqueue', 'from-rust', '--queue', 'cross', '--payload', `${SECRET} from rust`], env());
      const client = new LeaseClient({ url: served.url, apiKey: served.key, keys });
      let seen: string | null = null;
      await new Worker(client, (job) => { seen = job.text; return 'ok'; }, { queue: 'cross', maxJobs: 1, handleSignals: false }).run();
      assert.equal(seen, `${SECRET} from rust`);
      await client.enqueue('cross', { id: 'from-ts', payload: `${SECRET} from ts` });
      const claimed = JSON.parse(lease(['claim-next', '--queue', 'cross', '--owner', 'cli', '--ttl', '30', '--json'], env())) as Array<{ id: string; payload: string }> | { leases: Array<{ id: string; payload: string }> };
      const leases = Array.isArray(claimed) ? claimed : claimed.leases;
      assert.equal(leases[0]?.id, 'from-ts');
      assert.equal(leases[0]?.payload, `${SECRET} from ts`);
    });

    test('a worker without the key fails the job with an error naming the key, and never runs the handler', async () => {
      const producer = new LeaseClient({ url: served.url, apiKey: served.key, keys });
      await producer.enqueue('nokey', { id: 'locked', payload: SECRET, maxAttempts: 1 });
      const keyless = new LeaseClient({ url: served.url, apiKey: served.key, keys: null });
      let ran = false;
      const summary = await new Worker(keyless, () => { ran = true; return 'x'; }, { queue: 'nokey', maxJobs: 1, handleSignals: false }).run();
      assert.equal(ran, false);
      assert.deepEqual(summary, { completed: 0, failed: 1, lost: 0 });
      const job = await keyless.job('locked');
      assert.equal(job.status, 'dead');
      assert.ok(job.error?.includes(keys.sealingKey), job.error ?? '');
      assert.ok(!job.error?.includes('4111'));
    });
  });
}
