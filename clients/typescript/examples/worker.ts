/**
 * An example worker: `LEASE_SERVER=http://127.0.0.1:7070 LEASE_API_KEY=... node dist/examples/worker.js [QUEUE]`.
 *
 * Each job's payload is text; the worker says it started, waits `LEASE_EXAMPLE_WORK_MS`
 * (default 0) or until its lease is lost, and stores the text upper-cased. SIGTERM stops it
 * claiming and lets the running jobs finish (within 30 s) before it exits.
 */
import { LeaseClient, Worker } from '../src/index.js';

const url = process.env.LEASE_SERVER ?? 'http://127.0.0.1:7070';
const apiKey = process.env.LEASE_API_KEY;
const queue = process.argv[2] ?? 'default';
const work = Number(process.env.LEASE_EXAMPLE_WORK_MS ?? '0');

const client = new LeaseClient({ url, ...(apiKey === undefined ? {} : { apiKey }) });
const worker = new Worker(
  client,
  async (job) => {
    await job.progress('started');
    await new Promise<void>((done) => {
      const timer = setTimeout(done, work);
      job.signal.addEventListener('abort', () => { clearTimeout(timer); done(); }, { once: true });
    });
    job.signal.throwIfAborted();
    return (job.text ?? '').toUpperCase();
  },
  { queue, concurrency: 4, onError: (e) => console.error(`lease worker: ${String(e)}`) },
);

const running = worker.run();
// Heard after the worker's own handler (registered as `run` began), which stopped its claiming.
process.once('SIGTERM', () => console.error('lease worker: stopping (SIGTERM): running jobs finish, nothing new starts'));
const summary = await running;
console.log(JSON.stringify(summary));
