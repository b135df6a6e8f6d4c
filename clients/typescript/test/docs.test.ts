/** The TypeScript examples of the README and of docs/guide/typescript.md compile and run as written. */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { LeaseClient } from '../src/index.js';
import { PACKAGE, Served } from './harness.js';

const REPO = join(PACKAGE, '../..');

function blocks(path: string): string[] {
  const text = readFileSync(join(REPO, path), 'utf8');
  return [...text.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1] as string);
}

/** Compiles `code` inside the package (so `@lease/client` resolves to the package itself) and runs it; its stdout. */
function run(name: string, code: string, served: Served): string {
  const dir = join(PACKAGE, 'dist', 'doc-examples');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${name}.ts`);
  writeFileSync(file, code);
  const tsc = join(PACKAGE, 'node_modules', '.bin', 'tsc');
  execFileSync(tsc, ['--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--types', 'node', '--skipLibCheck', file], { cwd: PACKAGE, stdio: 'inherit' });
  try {
    return execFileSync(process.execPath, [file.replace(/\.ts$/, '.js')], {
      env: { ...process.env, LEASE_SERVER: served.url, LEASE_API_KEY: served.key, LEASE_PAYLOAD_KEY: '', LEASE_PAYLOAD_KEY_FILE: '' },
      encoding: 'utf8',
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('the documentation\'s TypeScript', () => {
  let served: Served;
  before(async () => {
    served = await Served.start('sqlite');
  });
  after(async () => served.stop());

  test('the README\'s example runs as written', async () => {
    const [front] = blocks('README.md');
    assert.ok(front, 'the README has a ts block');
    assert.equal(run('readme', front, served).trim(), 'sent to ada@example.com');
  });

  test('the guide\'s example runs as written', async () => {
    const [example] = blocks('docs/guide/typescript.md');
    assert.ok(example, 'the guide has a ts block');
    assert.match(run('guide', example, served), /completed: 2, failed: 0, lost: 0/);
    const client = new LeaseClient({ url: served.url, apiKey: served.key, keys: null });
    assert.equal((await client.job('report-2')).result, 'rendered april on attempt 1');
  });
});
