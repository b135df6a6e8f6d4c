/** What the tests share: a live `lease serve` on SQLite or PostgreSQL, with an admin key. */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { before, after } from 'node:test';
import { LeaseClient } from '../src/index.js';

const HERE = fileURLToPath(new URL('.', import.meta.url));
/** The package's directory (the tests run from `dist/test`). */
export const PACKAGE = resolve(HERE, '../..');
const REPO = resolve(PACKAGE, '../..');
export const LEASE_BIN = process.env.LEASE_BIN ?? join(REPO, 'target/debug/lease');
export const ADMIN_PG = process.env.LEASE_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export const STORES = ['sqlite', 'postgres'] as const;
export type StoreKind = (typeof STORES)[number];

export function lease(args: string[], env: NodeJS.ProcessEnv = {}): string {
  return execFileSync(LEASE_BIN, args, { env: { ...process.env, ...env }, encoding: 'utf8' });
}

export function psql(url: string, sql: string): string {
  return execFileSync('psql', [url, '-v', 'ON_ERROR_STOP=1', '-qAt', '-c', sql], { encoding: 'utf8' });
}

export function unique(prefix: string): string {
  return `${prefix}_${process.pid}_${randomBytes(5).toString('hex')}`;
}

/** A running server over a store of its own, removed by `stop`. */
export class Served {
  private constructor(
    readonly kind: StoreKind,
    readonly db: string,
    readonly url: string,
    readonly key: string,
    private readonly process: ChildProcess,
    private readonly cleanup: () => void,
  ) {}

  static async start(kind: StoreKind, extra: string[] = []): Promise<Served> {
    let db: string;
    let cleanup: () => void;
    if (kind === 'sqlite') {
      const dir = mkdtempSync(join(tmpdir(), 'lease-ts-'));
      db = join(dir, 'served.db');
      cleanup = () => rmSync(dir, { recursive: true, force: true });
    } else {
      const name = unique('lease_ts');
      psql(ADMIN_PG, `CREATE DATABASE ${name}`);
      const url = new URL(ADMIN_PG);
      url.pathname = `/${name}`;
      db = url.toString();
      cleanup = () => psql(ADMIN_PG, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    }
    lease(['--db', db, 'init']);
    const made = JSON.parse(lease(['--db', db, 'keys', 'create', 'ts', '--scope', 'admin', '--json'])) as { key: string };
    const child = spawn(LEASE_BIN, ['--db', db, '--audit', 'serve', '--listen', '127.0.0.1:0', ...extra], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const url = await new Promise<string>((ok, fail) => {
      const lines = createInterface({ input: child.stderr! });
      const timer = setTimeout(() => fail(new Error('lease serve did not say where it listens')), 30_000);
      lines.on('line', (line) => {
        if (line.startsWith('lease: serving ')) {
          clearTimeout(timer);
          ok(line.split(/\s+/)[2] as string);
        }
      });
      child.on('exit', (code) => fail(new Error(`lease serve exited (${code})`)));
    });
    return new Served(kind, db, url, made.key, child, cleanup);
  }

  /** Everything the store holds, as text to search for a plaintext: the SQLite file and its
   * log byte for byte, or PostgreSQL's data as `pg_dump` writes it. */
  dump(): string {
    if (this.kind === 'sqlite') {
      const files = [this.db, `${this.db}-wal`].filter((f) => existsSync(f));
      return files.map((f) => readFileSync(f).toString('latin1')).join('');
    }
    return execFileSync('pg_dump', ['--data-only', this.db], { encoding: 'latin1' });
  }

  async stop(): Promise<void> {
    const exited = new Promise((ok) => this.process.once('exit', ok));
    this.process.kill('SIGTERM');
    await exited;
    this.cleanup();
  }
}

/** Polls `check` until it returns a value other than undefined, within `seconds`. */
export async function eventually<T>(what: string, check: () => Promise<T | undefined>, seconds = 20): Promise<T> {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const got = await check();
    if (got !== undefined) return got;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${seconds} s`);
    await new Promise((ok) => setTimeout(ok, 50));
  }
}

/** A server of the suite's own on `kind`, started before its tests and stopped after them, and a
 * client of it without keys: both set when the suite's tests run. */
export function suiteServer(kind: StoreKind): { served: Served; client: LeaseClient } {
  const suite = {} as { served: Served; client: LeaseClient };
  before(async () => {
    suite.served = await Served.start(kind);
    suite.client = new LeaseClient({ url: suite.served.url, apiKey: suite.served.key, keys: null });
  });
  after(async () => suite.served?.stop());
  return suite;
}
