/** The client's types come from `openapi.json`: it must be the document the server serves. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { LeaseClient } from '../src/index.js';
import { PACKAGE, Served, STORES } from './harness.js';

for (const kind of STORES) {
  test(`the checked-in document is the one lease serve serves (${kind})`, async () => {
    const served = await Served.start(kind);
    try {
      const client = new LeaseClient({ url: served.url, apiKey: served.key, keys: null });
      const live = await client.openapi();
      const checked = JSON.parse(readFileSync(join(PACKAGE, 'openapi.json'), 'utf8')) as unknown;
      assert.deepEqual(
        checked,
        live,
        'clients/typescript/openapi.json differs from the server\'s document: copy the server\'s /openapi.json over it and rebuild',
      );
    } finally {
      await served.stop();
    }
  });
}
